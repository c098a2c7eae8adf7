"""Migration revisions: each a fixed snapshot, never regenerated from the current code."""
