"""Apps a newcomer runs: `make run JOBSTREAM_APP=examples.document_analysis:app`."""
