"""The one exception type users see: a message that says what to fix, on one line."""


class ReprokitError(Exception):
    """A problem with the user's input or machine; ``tasks.py`` prints it and exits with code 2."""

    exit_code = 2


class RunFailed(ReprokitError):
    """One or more cells failed; what was measured is kept."""

    exit_code = 1


class GateFailed(ReprokitError):
    """A regression gate (compare --fail-on-regression) failed: a cell regressed beyond its limit, a
    cell it cannot judge, or no cell judged. 1, as a failed run: 2 is a usage error."""

    exit_code = 1


class StartFailed(ReprokitError):
    """One cell could not be started (its container refused to run): it is recorded as failed and the
    matrix goes on."""


class PreflightFailed(ReprokitError):
    """A preflight found cells that would not run or not be judged: the table above says why."""

    exit_code = 1


class DryRunRefused(ReprokitError):
    """A dry run printed what would run, and the preflight's quick checks (no steps) found cells that
    would not run or not be judged: 3, apart from a usage error (2, nothing planned) and a failed run or
    preflight (1), so that a script can tell a plan that cannot be made from a machine not ready for it."""

    exit_code = 3
