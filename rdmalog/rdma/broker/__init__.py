"""The broker side of KafkaDirect's datapaths: grants, ordered commits, metadata slots, commit slots,
prefaulting of granted head files."""
