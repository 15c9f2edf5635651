"""Input: raw bytes or file rows in; a validated envelope, or a rejection that says why."""
