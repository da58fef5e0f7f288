package io.rdmalog.rdma;

import java.io.IOException;

/** A refused control request: the service's error code ("offset_out_of_range", ...) and text. */
public class ControlException extends IOException {
  private static final long serialVersionUID = 1L;
  public final String code;

  public ControlException(String code, String message) {
    super(code + ": " + message);
    this.code = code;
  }
}
