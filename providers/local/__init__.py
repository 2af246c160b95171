"""The bundled local models: their catalogue, the chunked model files, and llama.cpp (xllamacpp) on 127.0.0.1 in a child process."""
