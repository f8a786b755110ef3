"""The agent's refusals: every one has a stable snake_case `code` and a sentence a person can act on.

Codes are shared with Host (job report `reason`, workload status `reason`), so they never change
once published; new situations get new codes.
"""

from __future__ import annotations


class AgentError(Exception):
    """Base refusal. `code` is stable; `message` is one sentence for a person."""

    code = "agent_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class ConfigError(AgentError):
    """A misconfiguration the operator must fix; the CLI prints it on one line and exits non-zero."""

    code = "agent_misconfigured"


class StateLocked(ConfigError):
    code = "state_dir_locked"


class NotEnrolled(ConfigError):
    code = "not_enrolled"


class BundleRefused(AgentError):
    """A bundle failed download, verification or safe extraction; nothing of it is kept."""

    code = "bundle_refused"


class DataRefused(AgentError):
    """A step's input could not be delivered or one of its outputs not uploaded; the step fails with
    the code (`input_*`, `output_*`) as its report's `reason`."""

    code = "data_refused"


class IngressRefused(AgentError):
    """An ingress server block was invalid or failed `nginx -t`; the previous file is back in place."""

    code = "ingress_invalid"


class IllegalTransition(AgentError):
    """A lifecycle was asked to move from a state that does not allow it: a programming error."""

    code = "illegal_transition"
