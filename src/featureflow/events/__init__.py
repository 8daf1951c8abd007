"""The transaction events featureflow's example consumes: generation and encoding."""
