"""Tools around the model: benchmark, export to MarianMT and CTranslate2, plots, time to quality."""
