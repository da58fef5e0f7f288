"""Who a control session is and what it may be granted: SASL on the control connection, every
grant checked against the `Authorizer`, internal topics never granted.

A session starts as `User:ANONYMOUS`. With `credentials` configured, every request but
`authenticate` is refused (`authentication_required`) until a SASL exchange (PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512) has named its principal; a failed exchange closes the connection.
Grants need what Kafka's handlers need: WRITE on the topic for produce access, READ on the topic
for read access, READ on the group and the topic for a commit slot, DESCRIBE on the topic for its
partition count, IDEMPOTENT_WRITE on the cluster for a producer id. A refusal is the Kafka error a
Kafka client would get (TOPIC_AUTHORIZATION_FAILED, ...); an internal topic is INVALID_TOPIC, as
Kafka answers a Produce to one.
"""

from __future__ import annotations

import base64
import binascii
import logging

from rdmalog.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    InvalidTopicError,
    TopicAuthorizationFailedError,
)
from rdmalog.rdma.control import ControlError, Session, arg
from rdmalog.security.authorizer import (
    ANONYMOUS,
    CLUSTER_NAME,
    AllowAll,
    Authorizer,
    Operation,
    Principal,
    Resource,
    ResourceType,
    is_internal_topic,
)
from rdmalog.security.sasl import AuthenticationError, Credentials, SaslServer

log = logging.getLogger(__name__)

MAX_SASL_MESSAGE = 4096  # bytes of one SASL message from a client (SCRAM's are ~200)


class AuthenticationFailed(ControlError):
    """Refused credentials: answered, then the connection is closed (ControlServer)."""

    close = True

    def __init__(self, message: str):
        super().__init__("SaslAuthenticationFailedError", message)


class AccessControl:
    """The service's gate: authentication state per session, authorization of every grant."""

    def __init__(self, credentials: Credentials | None, authorizer: Authorizer | None):
        self.credentials = credentials
        self.authorizer = authorizer or AllowAll()

    @property
    def authentication_required(self) -> bool:
        return self.credentials is not None

    @staticmethod
    def principal(s: Session) -> Principal:
        return s.state.get("principal", ANONYMOUS)

    def check_authenticated(self, s: Session, op: str) -> None:
        if self.credentials is not None and "principal" not in s.state and op != "authenticate":
            raise ControlError(
                "authentication_required",
                "this RDMA service requires SASL authentication (PLAIN, SCRAM-SHA-256, "
                "SCRAM-SHA-512) before any other request",
            )

    def authenticate(self, s: Session, req: dict) -> dict:
        """One step of a SASL exchange: `{mechanism, data}` (base64) -> `{data, done}`."""
        if self.credentials is None:
            raise ControlError("invalid_request", "authentication is not enabled on this service")
        if "principal" in s.state:
            raise ControlError("invalid_request", "the session is authenticated already")
        try:
            data = base64.b64decode(arg(req, "data", str), validate=True)
        except binascii.Error as e:
            raise ControlError("invalid_request", f"'data' is not base64: {e}") from None
        if len(data) > MAX_SASL_MESSAGE:
            raise AuthenticationFailed("SASL message too large")
        server = s.state.get("sasl")
        try:
            if server is None:
                server = s.state["sasl"] = SaslServer(arg(req, "mechanism", str), self.credentials)
            answer = server.step(data)
        except AuthenticationError as e:
            log.warning("rdma: authentication of %s failed: %s", s.peer, e)
            raise AuthenticationFailed(str(e)) from None
        if server.done:
            del s.state["sasl"]
            s.state["principal"] = server.principal
            log.info("rdma: control session %d from %s is %s", s.id, s.peer, server.principal)
        return {"data": base64.b64encode(answer).decode(), "done": server.done}

    # -- authorization -----------------------------------------------------------------------------
    def allowed(self, s: Session, operation: Operation, resource: Resource) -> bool:
        host = s.peer[0] if isinstance(s.peer, tuple) and s.peer else str(s.peer)
        return self.authorizer.authorize(self.principal(s), host, operation, resource)

    def check_topic(self, s: Session, topic: str, operation: Operation) -> None:
        """Raise the Kafka error a Kafka client would get unless s may do `operation` on topic."""
        if is_internal_topic(topic):
            raise InvalidTopicError(f"internal topic {topic!r} is not served to native clients")
        if not self.allowed(s, operation, Resource(ResourceType.TOPIC, topic)):
            raise TopicAuthorizationFailedError(
                f"{self.principal(s)} may not {operation.value.upper()} topic {topic!r}"
            )

    def check_group(self, s: Session, group: str) -> None:
        if not self.allowed(s, Operation.READ, Resource(ResourceType.GROUP, group)):
            raise GroupAuthorizationFailedError(f"{self.principal(s)} may not READ group {group!r}")

    def check_cluster(self, s: Session, operation: Operation) -> None:
        if not self.allowed(s, operation, Resource(ResourceType.CLUSTER, CLUSTER_NAME)):
            raise ClusterAuthorizationFailedError(
                f"{self.principal(s)} may not {operation.value.upper()} on the cluster"
            )

    def may(self, s: Session, topic: str, operation: Operation) -> bool:
        """Whether a grant s holds on `topic` is still allowed (after an ACL change)."""
        try:
            self.check_topic(s, topic, operation)
        except (InvalidTopicError, TopicAuthorizationFailedError):
            return False
        return True
