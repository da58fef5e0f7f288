"""Store exceptions, each carrying the Kafka protocol error code a client understands."""

from __future__ import annotations


class KafkaError(Exception):
    """Base of every store error; `error_code` is the Kafka protocol error code."""

    error_code: int = -1  # UNKNOWN_SERVER_ERROR
    retriable: bool = False


class OffsetOutOfRangeError(KafkaError):
    error_code = 1


class CorruptRecordError(KafkaError):
    error_code = 2
    retriable = True


class UnknownTopicOrPartitionError(KafkaError):
    error_code = 3
    retriable = True


class NotLeaderOrFollowerError(KafkaError):
    error_code = 6
    retriable = True


class MessageTooLargeError(KafkaError):
    error_code = 10


class InvalidTopicError(KafkaError):
    error_code = 17


class RecordListTooLargeError(KafkaError):
    error_code = 18


class NotEnoughReplicasError(KafkaError):
    error_code = 19
    retriable = True


class InvalidRequiredAcksError(KafkaError):
    error_code = 21


class InvalidTimestampError(KafkaError):
    error_code = 32


class TopicExistsError(KafkaError):
    error_code = 36


class InvalidPartitionsError(KafkaError):
    error_code = 37


class InvalidReplicationFactorError(KafkaError):
    error_code = 38


class InvalidRequestError(KafkaError):
    error_code = 42


class OutOfOrderSequenceError(KafkaError):
    error_code = 45


class DuplicateSequenceNumberError(KafkaError):
    error_code = 46


class InvalidProducerEpochError(KafkaError):
    error_code = 47


class InvalidTxnStateError(KafkaError):
    error_code = 48


class InvalidProducerIdMappingError(KafkaError):
    error_code = 49


class TransactionCoordinatorFencedError(KafkaError):
    error_code = 52


class UnknownProducerIdError(KafkaError):
    error_code = 59


class FencedLeaderEpochError(KafkaError):
    error_code = 74
    retriable = True


class UnknownLeaderEpochError(KafkaError):
    error_code = 75
    retriable = True


class OffsetNotAvailableError(KafkaError):
    error_code = 78
    retriable = True


class ProducerFencedError(KafkaError):
    error_code = 90


class InvalidConfigError(KafkaError):
    error_code = 40


class PolicyViolationError(KafkaError):
    error_code = 44


class KafkaStorageError(KafkaError):
    error_code = 56
    retriable = True


class UnsupportedCompressionTypeError(KafkaError):
    error_code = 76


class InvalidRecordError(KafkaError):
    error_code = 87


class TopicAuthorizationFailedError(KafkaError):
    error_code = 29


class GroupAuthorizationFailedError(KafkaError):
    error_code = 30


class ClusterAuthorizationFailedError(KafkaError):
    error_code = 31


class SaslAuthenticationFailedError(KafkaError):
    error_code = 58


class UnknownTopicIdError(KafkaError):
    error_code = 100
    retriable = True


class InconsistentTopicIdError(KafkaError):
    error_code = 103
    retriable = True


def error_for_code(code: int) -> type[KafkaError]:
    """The store exception class for a Kafka error code (KafkaError for codes without one)."""
    return _BY_CODE.get(code, KafkaError)


ALL_ERRORS: tuple[type[KafkaError], ...] = tuple(
    c for c in list(globals().values()) if isinstance(c, type) and issubclass(c, KafkaError)
)
_BY_CODE = {c.error_code: c for c in ALL_ERRORS if c is not KafkaError}
