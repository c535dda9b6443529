-- Version 13 to 14: durable steps (`ctx.step`, worker/steps.py). A step that finished is
-- journaled once per job, fenced by the attempt that ran it; a later attempt replays it (its
-- result, text and progress) instead of running it again. The reaper's `lost` keeps the cost
-- its attempt's journaled steps recorded (FINISH_ATTEMPT), and an accepted result's charge may
-- include steps of earlier attempts (SUCCEED_ATTEMPTS): both are statements, not data.
-- Additive: code of version 13 neither reads nor writes it.
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py).

CREATE TABLE job_steps (
    job_id        uuid NOT NULL,
    step          text NOT NULL,
    attempt       integer NOT NULL,
    run_token     uuid NOT NULL,
    result        jsonb,
    output        jsonb NOT NULL DEFAULT '[]',
    input_tokens  integer NOT NULL DEFAULT 0,
    output_tokens integer NOT NULL DEFAULT 0,
    cost_usd      numeric(18, 8) NOT NULL DEFAULT 0,
    cost_known    boolean NOT NULL DEFAULT true,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, step)
);
