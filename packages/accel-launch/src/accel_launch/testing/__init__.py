"""The monorepo's multi-process test helper: a script or a function on N real CPU ranks."""
