package io.rdmalog.rdma;

import java.io.Closeable;
import java.io.EOFException;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.net.InetSocketAddress;
import java.net.SocketTimeoutException;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;

/**
 * One TCP connection, non-blocking underneath, with reads and writes that wait up to a deadline
 * and give up when the thread is interrupted (Spark interrupts a task it cancels). A short spin
 * precedes each wait: a round trip to a local broker is tens of microseconds, less than a wakeup.
 */
final class SocketIo implements Closeable {
  private static final long SPIN_NANOS = 20_000;

  private final SocketChannel ch;
  private final Selector selector;
  private final SelectionKey key;

  SocketIo(String address, int timeoutMs) throws IOException {
    int colon = address.lastIndexOf(':');
    if (colon <= 0) {
      throw new IOException("not a host:port address: " + address);
    }
    String host = address.substring(0, colon);
    if (host.startsWith("[") && host.endsWith("]")) {
      host = host.substring(1, host.length() - 1);
    }
    int port = Integer.parseInt(address.substring(colon + 1));
    ch = SocketChannel.open();
    try {
      ch.socket().connect(new InetSocketAddress(host, port), timeoutMs);
      ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
      ch.configureBlocking(false);
      selector = Selector.open();
      key = ch.register(selector, SelectionKey.OP_READ);
    } catch (IOException | RuntimeException e) {
      ch.close();
      throw e;
    }
  }

  static long deadline(long timeoutMs) {
    return System.nanoTime() + timeoutMs * 1_000_000L;
  }

  /** Write every byte of `bufs` (in order). */
  void writeFully(long deadlineNanos, ByteBuffer... bufs) throws IOException {
    for (ByteBuffer b : bufs) {
      while (b.hasRemaining()) {
        if (ch.write(b) == 0) {
          await(SelectionKey.OP_WRITE, deadlineNanos);
        }
      }
    }
  }

  /** Fill `dst` up to its limit. EOFException when the peer closed. */
  void readFully(ByteBuffer dst, long deadlineNanos) throws IOException {
    long spinUntil = 0;
    while (dst.hasRemaining()) {
      int n = ch.read(dst);
      if (n < 0) {
        throw new EOFException("connection closed by the peer");
      }
      if (n > 0) {
        continue;
      }
      long now = System.nanoTime();
      if (spinUntil == 0) {
        spinUntil = now + SPIN_NANOS;
      }
      if (now < spinUntil) {
        Thread.onSpinWait();
        continue;
      }
      await(SelectionKey.OP_READ, deadlineNanos);
    }
  }

  /** Read what arrives into `dst`, waiting until at least one byte did. */
  void readSome(ByteBuffer dst, long deadlineNanos) throws IOException {
    int limit = dst.limit();
    dst.limit(dst.position() + 1);
    readFully(dst, deadlineNanos);
    dst.limit(limit);
    ch.read(dst); // and whatever else is there (an end of stream shows on the next read)
  }

  /** What has arrived, without waiting: bytes read, or -1 when the peer closed. */
  int readNow(ByteBuffer dst) throws IOException {
    return ch.read(dst);
  }

  private void await(int op, long deadlineNanos) throws IOException {
    if (Thread.currentThread().isInterrupted()) {
      throw new InterruptedIOException("interrupted while waiting for the broker");
    }
    long left = (deadlineNanos - System.nanoTime()) / 1_000_000L;
    if (left <= 0) {
      throw new SocketTimeoutException("no answer from the broker in time");
    }
    key.interestOps(op);
    selector.select(left);
    selector.selectedKeys().clear();
    if (Thread.currentThread().isInterrupted()) {
      throw new InterruptedIOException("interrupted while waiting for the broker");
    }
  }

  boolean isOpen() {
    return ch.isOpen();
  }

  @Override
  public void close() {
    try {
      selector.close();
    } catch (IOException ignored) {
      // closing: nothing to do about it
    }
    try {
      ch.close();
    } catch (IOException ignored) {
      // closing: nothing to do about it
    }
  }
}
