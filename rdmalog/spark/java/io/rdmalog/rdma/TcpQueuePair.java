package io.rdmalog.rdma;

import java.io.Closeable;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The initiator's end of a queue pair on rdmalog's software RNIC over TCP
 * (rdmalog/rdma/transport/tcp.py). After a JSON setup line each way ({"qp": n}), the connection
 * carries 48-byte little-endian frames (op, status, flags, rkey, wr_id, addr, length, imm, a, b),
 * a WRITE's or SEND's payload after its frame and a READ's data after its response. The target's
 * engine executes one-sided operations on its registered regions and answers in order, so a
 * client with one operation outstanding matches the next response to it.
 *
 * <p>This end registers no memory: what the broker targets at it (it sends a consumer nothing) is
 * answered as an RNIC without registrations would, a SEND is taken and dropped.
 */
public final class TcpQueuePair implements Closeable {
  static final int HDR = 48;
  static final int OP_WRITE = 1;
  static final int OP_WRITE_IMM = 2;
  static final int OP_READ = 3;
  static final int OP_FAA = 4;
  static final int OP_CAS = 5;
  static final int OP_SEND = 6;
  static final int OP_DISCONNECT = 7;
  static final int RESP = 0x80;
  public static final int SUCCESS = 0;
  static final int REM_ACCESS_ERR = 10;
  private static final int SETUP_LIMIT = 4096;
  private static final AtomicInteger QP_NUMS = new AtomicInteger(1);

  private final SocketIo io;
  private final int timeoutMs;
  private final ByteBuffer out = ByteBuffer.allocateDirect(HDR).order(ByteOrder.LITTLE_ENDIAN);
  private final ByteBuffer in = ByteBuffer.allocateDirect(HDR).order(ByteOrder.LITTLE_ENDIAN);
  private final ByteBuffer scratch = ByteBuffer.allocateDirect(64 * 1024);
  private boolean closed;

  private TcpQueuePair(SocketIo io, int timeoutMs) {
    this.io = io;
    this.timeoutMs = timeoutMs;
  }

  /** Connect a queue pair to the broker's `rdma_address` (host:port). */
  public static TcpQueuePair connect(String address, int timeoutMs) throws IOException {
    SocketIo io = new SocketIo(address, timeoutMs);
    try {
      long deadline = SocketIo.deadline(timeoutMs);
      String setup = "{\"qp\": " + QP_NUMS.getAndIncrement() + "}\n";
      io.writeFully(deadline, ByteBuffer.wrap(setup.getBytes(StandardCharsets.UTF_8)));
      ByteBuffer one = ByteBuffer.allocate(1);
      int n = 0;
      while (true) { // the peer's setup line, byte by byte: its frames come right behind it
        one.clear();
        io.readFully(one, deadline);
        if (one.get(0) == '\n') {
          break;
        }
        if (++n > SETUP_LIMIT) {
          throw new IOException("oversized connection setup from " + address);
        }
      }
      return new TcpQueuePair(io, timeoutMs);
    } catch (IOException | RuntimeException e) {
      io.close();
      throw e;
    }
  }

  /**
   * One-sided READ of `length` bytes at (remoteAddr, rkey) into dst[offset, offset + length).
   * Returns the completion status (SUCCESS = 0; else ibv_wc_status, e.g. REM_ACCESS_ERR = 10).
   */
  public int read(long remoteAddr, int rkey, byte[] dst, int offset, int length)
      throws IOException {
    post(OP_READ, rkey, remoteAddr, length, null);
    return await(OP_READ, ByteBuffer.wrap(dst, offset, length), length);
  }

  /** SEND `payload` (at most 256 bytes) and wait for its completion status. */
  public int send(byte[] payload) throws IOException {
    post(OP_SEND, 0, 0, payload.length, ByteBuffer.wrap(payload));
    return await(OP_SEND, null, 0);
  }

  private void post(int op, int rkey, long addr, int length, ByteBuffer payload)
      throws IOException {
    if (closed) {
      throw new BrokerDisconnectedException("the queue pair is closed");
    }
    frame(op, 0, rkey, 0L, addr, length, 0L);
    try {
      if (payload == null) {
        io.writeFully(SocketIo.deadline(timeoutMs), out);
      } else {
        io.writeFully(SocketIo.deadline(timeoutMs), out, payload);
      }
    } catch (IOException e) {
      throw broken(e);
    }
  }

  private void frame(int op, int status, int rkey, long wrId, long addr, int length, long a) {
    out.clear();
    out.put((byte) op).put((byte) status).putShort((short) 0).putInt(rkey);
    out.putLong(wrId).putLong(addr).putInt(length).putInt(0).putLong(a).putLong(0L);
    out.flip();
  }

  private int await(int op, ByteBuffer data, int length) throws IOException {
    long deadline = SocketIo.deadline(timeoutMs);
    try {
      while (true) {
        in.clear();
        io.readFully(in, deadline);
        int fop = in.get(0) & 0xFF;
        int status = in.get(1) & 0xFF;
        int got = in.getInt(24);
        if ((fop & RESP) != 0) {
          if ((fop & 0x7F) != op) {
            throw new IOException("a response to op " + (fop & 0x7F) + " while waiting for " + op);
          }
          if (op == OP_READ && got != 0) {
            if (got != length) {
              throw new IOException("a READ of " + length + " bytes answered with " + got);
            }
            io.readFully(data, deadline);
          }
          return status;
        }
        serve(fop, in.getInt(4), in.getLong(8), got);
      }
    } catch (IOException e) {
      throw broken(e);
    }
  }

  /** A request the peer targets at this end, which registers nothing. */
  private void serve(int op, int rkey, long wrId, int length) throws IOException {
    long deadline = SocketIo.deadline(timeoutMs);
    if (op == OP_DISCONNECT) {
      throw new BrokerDisconnectedException("the broker closed the queue pair");
    }
    if (op == OP_WRITE || op == OP_WRITE_IMM || op == OP_SEND) {
      discard(length, deadline);
    }
    int status = op == OP_SEND ? SUCCESS : REM_ACCESS_ERR;
    frame(op | RESP, status, 0, wrId, 0L, 0, 0L);
    io.writeFully(deadline, out);
  }

  private void discard(int length, long deadline) throws IOException {
    long left = length & 0xFFFFFFFFL;
    while (left > 0) {
      scratch.clear();
      scratch.limit((int) Math.min(left, scratch.capacity()));
      io.readFully(scratch, deadline);
      left -= scratch.position();
    }
  }

  private IOException broken(IOException e) {
    if (e instanceof java.io.InterruptedIOException) {
      closed = true; // mid-operation: the stream's framing is lost
      io.close();
      return e;
    }
    closed = true;
    io.close();
    if (e instanceof BrokerDisconnectedException) {
      return e;
    }
    BrokerDisconnectedException d = new BrokerDisconnectedException("queue pair lost: " + e);
    d.initCause(e);
    return d;
  }

  public boolean isClosed() {
    return closed;
  }

  @Override
  public void close() {
    if (!closed) {
      closed = true;
      try {
        frame(OP_DISCONNECT, 0, 0, 0L, 0L, 0, 0L);
        io.writeFully(SocketIo.deadline(100), out);
      } catch (IOException ignored) {
        // the peer is gone already
      }
    }
    io.close();
  }
}
