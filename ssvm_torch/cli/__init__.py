"""Command-line clients: ``ssvm-train`` (:mod:`.train`) and ``ssvm-path`` (:mod:`.path`)."""
