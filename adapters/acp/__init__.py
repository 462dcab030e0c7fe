"""ACP (Agent Client Protocol) over stdio."""
