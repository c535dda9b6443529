"""`/v1`: the OpenAI Responses API subset that background mode uses, over jobstream's jobs.

A response is a job; its event stream is the job's event log, translated (mapping.py). See
docs/openai.md for what maps to what.
"""
