"""Kafka's error codes, one table for the store, the RDMA datapaths and the gateway, and the store's
exceptions, each carrying the code a client understands.

The codes and their names are Kafka's (`org.apache.kafka.common.protocol.Errors`); only those rdmalog
answers with are listed.
"""

from __future__ import annotations

UNKNOWN_SERVER_ERROR = -1
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_TOPIC_EXCEPTION = 17
RECORD_LIST_TOO_LARGE = 18
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
INVALID_REQUIRED_ACKS = 21
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
INVALID_TIMESTAMP = 32
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
INVALID_REQUEST = 42
POLICY_VIOLATION = 44
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
TRANSACTION_COORDINATOR_FENCED = 52
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
SECURITY_DISABLED = 54
KAFKA_STORAGE_ERROR = 56
SASL_AUTHENTICATION_FAILED = 58
UNKNOWN_PRODUCER_ID = 59
INVALID_PRINCIPAL_TYPE = 67
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
FETCH_SESSION_ID_NOT_FOUND = 70
TOPIC_DELETION_DISABLED = 73
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
UNSUPPORTED_COMPRESSION_TYPE = 76
OFFSET_NOT_AVAILABLE = 78
MEMBER_ID_REQUIRED = 79
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
GROUP_SUBSCRIBED_TO_TOPIC = 86
INVALID_RECORD = 87
PRODUCER_FENCED = 90
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93
UNKNOWN_TOPIC_ID = 100
INCONSISTENT_TOPIC_ID = 103
UNSUPPORTED_ENDPOINT_TYPE = 119


class KafkaError(Exception):
    """Base of every store error; `error_code` is the Kafka protocol error code. `record_errors`
    lists (record index in its batch, message) for the records that failed a record-level check
    (Produce v8+ answers them as `record_errors`)."""

    error_code: int = UNKNOWN_SERVER_ERROR
    retriable: bool = False
    record_errors: tuple[tuple[int, str], ...] = ()


class OffsetOutOfRangeError(KafkaError):
    error_code = OFFSET_OUT_OF_RANGE


class CorruptRecordError(KafkaError):
    error_code = CORRUPT_MESSAGE
    retriable = True


class UnknownTopicOrPartitionError(KafkaError):
    error_code = UNKNOWN_TOPIC_OR_PARTITION
    retriable = True


class NotLeaderOrFollowerError(KafkaError):
    error_code = NOT_LEADER_OR_FOLLOWER
    retriable = True


class MessageTooLargeError(KafkaError):
    error_code = MESSAGE_TOO_LARGE


class InvalidTopicError(KafkaError):
    error_code = INVALID_TOPIC_EXCEPTION


class RecordListTooLargeError(KafkaError):
    error_code = RECORD_LIST_TOO_LARGE


class NotEnoughReplicasError(KafkaError):
    error_code = NOT_ENOUGH_REPLICAS
    retriable = True


class NotEnoughReplicasAfterAppendError(KafkaError):
    error_code = NOT_ENOUGH_REPLICAS_AFTER_APPEND
    retriable = True


class RequestTimedOutError(KafkaError):
    error_code = REQUEST_TIMED_OUT
    retriable = True


class InvalidRequiredAcksError(KafkaError):
    error_code = INVALID_REQUIRED_ACKS


class InvalidTimestampError(KafkaError):
    error_code = INVALID_TIMESTAMP


class TopicExistsError(KafkaError):
    error_code = TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(KafkaError):
    error_code = INVALID_PARTITIONS


class InvalidReplicationFactorError(KafkaError):
    error_code = INVALID_REPLICATION_FACTOR


class InvalidRequestError(KafkaError):
    error_code = INVALID_REQUEST


class OutOfOrderSequenceError(KafkaError):
    error_code = OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceNumberError(KafkaError):
    error_code = DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpochError(KafkaError):
    error_code = INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(KafkaError):
    error_code = INVALID_TXN_STATE


class InvalidProducerIdMappingError(KafkaError):
    error_code = INVALID_PRODUCER_ID_MAPPING


class TransactionCoordinatorFencedError(KafkaError):
    error_code = TRANSACTION_COORDINATOR_FENCED


class UnknownProducerIdError(KafkaError):
    error_code = UNKNOWN_PRODUCER_ID


class FencedLeaderEpochError(KafkaError):
    error_code = FENCED_LEADER_EPOCH
    retriable = True


class UnknownLeaderEpochError(KafkaError):
    error_code = UNKNOWN_LEADER_EPOCH
    retriable = True


class OffsetNotAvailableError(KafkaError):
    error_code = OFFSET_NOT_AVAILABLE
    retriable = True


class ProducerFencedError(KafkaError):
    error_code = PRODUCER_FENCED


class InvalidConfigError(KafkaError):
    error_code = INVALID_CONFIG


class PolicyViolationError(KafkaError):
    error_code = POLICY_VIOLATION


class KafkaStorageError(KafkaError):
    error_code = KAFKA_STORAGE_ERROR
    retriable = True


class UnsupportedCompressionTypeError(KafkaError):
    error_code = UNSUPPORTED_COMPRESSION_TYPE


class InvalidRecordError(KafkaError):
    error_code = INVALID_RECORD


class TopicAuthorizationFailedError(KafkaError):
    error_code = TOPIC_AUTHORIZATION_FAILED


class GroupAuthorizationFailedError(KafkaError):
    error_code = GROUP_AUTHORIZATION_FAILED


class ClusterAuthorizationFailedError(KafkaError):
    error_code = CLUSTER_AUTHORIZATION_FAILED


class SaslAuthenticationFailedError(KafkaError):
    error_code = SASL_AUTHENTICATION_FAILED


class UnknownTopicIdError(KafkaError):
    error_code = UNKNOWN_TOPIC_ID
    retriable = True


class InconsistentTopicIdError(KafkaError):
    error_code = INCONSISTENT_TOPIC_ID
    retriable = True


def error_code_of(exc: BaseException) -> int:
    """The Kafka error code an exception carries; an OSError is KAFKA_STORAGE_ERROR (what Kafka
    answers for an I/O error in a log dir); UNKNOWN_SERVER_ERROR for anything else."""
    code = getattr(exc, "error_code", None)
    if isinstance(code, int):
        return code
    return KAFKA_STORAGE_ERROR if isinstance(exc, OSError) else UNKNOWN_SERVER_ERROR


def error_for_code(code: int) -> type[KafkaError]:
    """The store exception class for a Kafka error code (KafkaError for codes without one)."""
    return _BY_CODE.get(code, KafkaError)


ALL_ERRORS: tuple[type[KafkaError], ...] = tuple(
    c for c in list(globals().values()) if isinstance(c, type) and issubclass(c, KafkaError)
)
_BY_CODE = {c.error_code: c for c in ALL_ERRORS if c is not KafkaError}
