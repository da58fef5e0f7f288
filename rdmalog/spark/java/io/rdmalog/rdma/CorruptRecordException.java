package io.rdmalog.rdma;

import java.io.IOException;

/** A record batch whose bytes cannot be what the broker validated (CRC, length, encoding). */
public class CorruptRecordException extends IOException {
  private static final long serialVersionUID = 1L;

  public CorruptRecordException(String message) {
    super(message);
  }
}
