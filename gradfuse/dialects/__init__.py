"""gradfuse's dialects: `tg` (tensor graph) and, later, `kernel`."""
