package io.rdmalog.spark;

/** A bad option; the message names it (the Python source's OptionError). */
public class OptionException extends IllegalArgumentException {
  private static final long serialVersionUID = 1L;

  public OptionException(String message) {
    super(message);
  }
}
