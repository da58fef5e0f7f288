package io.rdmalog.rdma;

import java.io.IOException;

/** The broker's RDMA service went away (stopped, restarting, or its process died). */
public class BrokerDisconnectedException extends IOException {
  private static final long serialVersionUID = 1L;

  public BrokerDisconnectedException(String message) {
    super(message);
  }
}
