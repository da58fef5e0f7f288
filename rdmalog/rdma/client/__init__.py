"""The native client side: the endpoint (control connection + queue pair), producer, consumer, offsets;
`_batch.c` is the consumer's C decoder of plain record batches."""
