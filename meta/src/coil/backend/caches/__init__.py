"""coil.backend's on-disk caches: whole graphs, AOTAutograd results, frontend (Dynamo-graph) entries, and the source hashing their keys need."""
