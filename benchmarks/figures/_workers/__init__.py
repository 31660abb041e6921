"""The figures' jobs: scripts started in fresh processes, one launcher per contender."""
