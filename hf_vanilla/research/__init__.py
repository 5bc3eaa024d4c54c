"""Research extras, departures from the paper and off by default: ensembles, reranking, language models,
distillation, tries. Nothing outside this subpackage imports it."""
