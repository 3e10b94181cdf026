"""The console's widgets: each draws one part of the model (GPUs, servers, the band, the log) when told to."""
