"""The Backend seam: the protocol every backend implements, its registry, and what it is handed."""
