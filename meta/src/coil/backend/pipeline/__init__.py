"""The compile pipeline: Dynamo graph -> AOTAutograd -> coil's stages -> a callable (`compile.coil_backend`)."""
