"""The run folder: append-only item records, the manifest, the writer's lock and the
throughput document, each typed and versioned."""
