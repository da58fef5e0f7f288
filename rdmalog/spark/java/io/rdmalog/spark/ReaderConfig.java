package io.rdmalog.spark;

import java.io.Serializable;

/** What an executor's reader needs of the options (shipped with the reader factory). */
record ReaderConfig(
    String control,
    String transport,
    boolean includeHeaders,
    boolean failOnDataLoss,
    long pollTimeoutMs,
    boolean checkCrcs)
    implements Serializable {

  static ReaderConfig of(ReadOptions o) {
    return new ReaderConfig(
        o.control, o.transport, o.includeHeaders, o.failOnDataLoss, o.pollTimeoutMs, o.checkCrcs);
  }
}
