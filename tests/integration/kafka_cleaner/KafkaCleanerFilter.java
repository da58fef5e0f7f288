import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.Map;

import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.Record;
import org.apache.kafka.common.record.internal.RecordBatch;
import org.apache.kafka.common.utils.BufferSupplier;

/**
 * Apache Kafka's own MemoryRecords.filterTo (from kafka-clients) over the bytes of a log segment,
 * deciding what stays by the log cleaner's rules for a log without transactions: the test's
 * reference for the bytes rdmalog's cleaner writes. Written for the test from Kafka's documented
 * behaviour (Cleaner.cleanInto's filter): a record stays when it is past the offset map, or it is
 * the latest of its key and has a value or its batch's delete horizon has not passed; a batch left
 * empty stays when it is an active producer's last or ends the cleaning round.
 *
 * Usage: KafkaCleanerFilter SEGMENT PARAMS OUT, where PARAMS holds lines "now MS", "retention MS",
 * "upper OFFSET", "latest OFFSET", "key HEX OFFSET" (the offset map) and "producer ID LAST EPOCH"
 * (LAST -1: its last entry is a marker).
 */
public class KafkaCleanerFilter {
    public static void main(String[] args) throws Exception {
        ByteBuffer in = ByteBuffer.wrap(Files.readAllBytes(Paths.get(args[0])));
        long now = 0, retention = 0, upper = 0, latest = -1;
        Map<String, Long> offsets = new HashMap<>();
        Map<Long, long[]> producers = new HashMap<>();
        for (String line : Files.readAllLines(Paths.get(args[1]))) {
            String[] f = line.trim().split(" ");
            switch (f[0]) {
                case "now": now = Long.parseLong(f[1]); break;
                case "retention": retention = Long.parseLong(f[1]); break;
                case "upper": upper = Long.parseLong(f[1]); break;
                case "latest": latest = Long.parseLong(f[1]); break;
                case "key": offsets.put(f[1], Long.parseLong(f[2])); break;
                case "producer":
                    producers.put(Long.parseLong(f[1]), new long[] {Long.parseLong(f[2]), Long.parseLong(f[3])});
                    break;
                default: throw new IllegalArgumentException(line);
            }
        }
        final long latestOffset = latest, upperBound = upper, currentTime = now;
        MemoryRecords.RecordFilter filter = new MemoryRecords.RecordFilter(now, retention) {
            @Override
            protected BatchRetentionResult checkBatchRetention(RecordBatch batch) {
                long[] p = producers.get(batch.producerId());
                boolean lastOfProducer = p != null && (p[0] >= 0
                        ? batch.lastOffset() == p[0]
                        : batch.isControlBatch() && batch.producerEpoch() == p[1]);
                BatchRetention retention = (batch.hasProducerId() && lastOfProducer)
                        || batch.nextOffset() == upperBound
                        ? BatchRetention.RETAIN_EMPTY : BatchRetention.DELETE_EMPTY;
                return new BatchRetentionResult(retention, false);
            }

            @Override
            protected boolean shouldRetainRecord(RecordBatch batch, Record record) {
                if (record.offset() > latestOffset) return true;
                if (!record.hasKey()) return false;
                byte[] key = new byte[record.keySize()];
                record.key().duplicate().get(key);
                Long found = offsets.get(HexFormat.of().formatHex(key));
                boolean newest = record.offset() >= (found == null ? -1L : found);
                boolean keepDeletes = batch.deleteHorizonMs().isEmpty()
                        || currentTime < batch.deleteHorizonMs().getAsLong();
                return newest && (record.hasValue() || keepDeletes);
            }
        };
        ByteBuffer out = ByteBuffer.allocate(in.capacity() * 2 + 1024);
        MemoryRecords.FilterResult result =
                MemoryRecords.readableRecords(in).filterTo(filter, out, BufferSupplier.NO_CACHING);
        ByteBuffer written = result.outputBuffer();
        written.flip();
        byte[] bytes = new byte[written.remaining()];
        written.get(bytes);
        Files.write(Paths.get(args[2]), bytes);
    }
}
