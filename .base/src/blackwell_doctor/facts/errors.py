"""The one error type for bad input, raised anywhere below the CLI.

Library code that meets a bad option value, an unreadable input file or a combination of
options that cannot work raises :class:`UserError` with a one-line message naming what the
user gave; the CLI's error boundary prints it and exits 2. This module imports nothing, so
raising it costs no start-up time and creates no dependency on the CLI.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user: printed as one line, exit 2."""
