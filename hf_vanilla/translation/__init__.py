"""Translation: the decoding options, the engines, corpus translation, attention extraction."""
