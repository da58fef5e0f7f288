package io.rdmalog.rdma;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.Closeable;
import java.io.IOException;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The RDMA service's control channel (rdmalog/rdma/control.py): one JSON object per line each
 * way, request and reply. One connection is one session; closing it releases what the session
 * holds. Errors come back as {"error": code, "message": text} and are thrown as ControlException.
 */
public final class ControlClient implements Closeable {
  static final int MAX_LINE = 1 << 16;
  private static final ObjectMapper JSON = new ObjectMapper();

  private final SocketIo io;
  private final int timeoutMs;
  private final ByteBuffer in = ByteBuffer.allocate(MAX_LINE + 1);

  public ControlClient(String address, int timeoutMs) throws IOException {
    this.io = new SocketIo(address, timeoutMs);
    this.timeoutMs = timeoutMs;
  }

  /** Send {"op": op, k1: v1, ...}; the reply, or ControlException for a refusal. */
  @SuppressWarnings("unchecked")
  public synchronized Map<String, Object> request(String op, Object... keyValues)
      throws IOException {
    Map<String, Object> req = new LinkedHashMap<>();
    req.put("op", op);
    for (int i = 0; i + 1 < keyValues.length; i += 2) {
      req.put((String) keyValues[i], keyValues[i + 1]);
    }
    byte[] line = JSON.writeValueAsBytes(req);
    long deadline = SocketIo.deadline(timeoutMs);
    byte[] reply;
    try {
      io.writeFully(deadline, ByteBuffer.wrap(line), ByteBuffer.wrap(new byte[] {'\n'}));
      reply = readLine(deadline);
    } catch (IOException e) {
      throw new ControlException("disconnected", "control connection failed: " + e);
    }
    Map<String, Object> r = JSON.readValue(reply, Map.class);
    Object error = r.get("error");
    if (error != null) {
      throw new ControlException(String.valueOf(error), String.valueOf(r.get("message")));
    }
    return r;
  }

  private byte[] readLine(long deadline) throws IOException {
    while (true) {
      for (int i = 0; i < in.position(); i++) {
        if (in.get(i) == '\n') {
          byte[] line = new byte[i];
          in.flip();
          in.get(line);
          in.get(); // the newline
          in.compact();
          return line;
        }
      }
      if (!in.hasRemaining()) {
        throw new IOException("a control reply over " + MAX_LINE + " bytes");
      }
      io.readSome(in, deadline);
    }
  }

  /** False once the service closed the connection (one look, no wait). */
  public synchronized boolean alive() {
    if (!io.isOpen()) {
      return false;
    }
    try {
      return !in.hasRemaining() || io.readNow(in) >= 0;
    } catch (IOException e) {
      return false;
    }
  }

  @Override
  public void close() {
    io.close();
  }

  /** An integer field of a reply (JSON numbers come as Integer, Long or BigInteger). */
  public static long num(Map<String, Object> reply, String name) {
    Object v = reply.get(name);
    if (v instanceof BigInteger) {
      return ((BigInteger) v).longValue(); // two's complement: a u64 token keeps its bits
    }
    if (!(v instanceof Number)) {
      throw new IllegalStateException("control reply without integer '" + name + "': " + reply);
    }
    return ((Number) v).longValue();
  }

  static String text(byte[] b) {
    return new String(b, StandardCharsets.UTF_8);
  }
}
