"""The compile pipeline: Dynamo graph -> AOTAutograd -> coil's stages -> a callable.

`backend.coil_backend` handles one Dynamo graph (frontend cache, pre-grad passes, AOTAutograd);
`compile.compile_graph` runs coil's stages on one AOTAutograd graph.
"""
