"""What a failed model call means for the run, the same for every backend (the SDK's status
errors, Claude Code's `is_error` results): the one table of fault classes.

- a rejected or missing credential, or an account that cannot pay -> `HarnessBroken` (halt);
- a prompt longer than the model accepts -> `ItemSkipped` (the item is skipped with the reason);
- an unknown model or endpoint, or a request refused as malformed -> `HarnessBroken` (halt: the
  request is ours);
- anything else still failing after the retries (rate limit, overload, 5xx, a reset) ->
  `TransientModelError` (rerun by pytest-rerunfailures, never graded).

An answer cut at the output limit (`truncated`) and an item past --item-timeout (`timeout`) are
not errors: they are the model's answers, and misses.
"""

from __future__ import annotations

from pytest_kgbench.errors import HarnessBroken, ItemSkipped, TransientModelError

TOO_LONG = ("prompt is too long", "context length", "context window")
BILLING = ("credit balance is too low", "billing")
CREDENTIAL = ("not logged in", "invalid api key", "authentication", "oauth token")


def classify_status(status: int | None, message: str) -> Exception:
    """The exception an API error status (None when the backend gives none) and its message
    become."""
    low = message.lower()
    if status in (401, 403) or any(c in low for c in CREDENTIAL):
        return HarnessBroken(f"the API rejected the credential ({status}): {message}")
    if status == 402 or any(b in low for b in BILLING):
        return HarnessBroken(f"the account cannot pay for the call ({status}): {message}")
    if status == 413 or any(t in low for t in TOO_LONG):
        return ItemSkipped(f"the prompt is longer than the model accepts ({status}): {message}")
    if status == 404:
        return HarnessBroken(f"the API does not know this model or endpoint (404): {message}")
    if status in (400, 422):
        return HarnessBroken(f"the API refused the request as malformed ({status}): {message}")
    return TransientModelError(f"the API call failed ({status}) after the retries: {message}")
