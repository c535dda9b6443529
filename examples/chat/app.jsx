// The chat example: @ai-sdk/react's useChat, unchanged, with `resume: true`, against jobstream's
// /api/chat (docs/chat.md). Reload the page mid-answer, restart the server, kill the worker: the
// answer goes on from the job's log in PostgreSQL. What is jobstream's own here is two things:
// - Stop also cancels the job (POST /api/chat/{id}/stop): useChat's stop() only hangs up.
// - A `data-resume` part before an error means the stream was cut at a retry (or a server stop)
//   and the message is not the answer yet: the page reconnects (resumeStream), and the replay
//   replaces the message with the accepted attempt's text.
// - An answer left incomplete with nothing to resume (a reload just after its job ended: the
//   reconnect is a 204) is filled in from its job, GET /api/jobs/{id}: the message's id is the
//   job's.
// The chat's id is in the URL (?chat=...), its messages in localStorage, so that a reload finds
// both; ?body={...} is JSON added to every request (job options: {"simulate": {...}}).
import { useChat } from '@ai-sdk/react';
import { DefaultChatTransport } from 'ai';
import { useEffect, useMemo, useRef, useState } from 'react';
import { createRoot } from 'react-dom/client';

const STORE = 'jobstream-chat:';
// Where keys are required: localStorage.setItem('jobstream-api-key', '<a tenant key>').
const KEY = localStorage.getItem('jobstream-api-key');
const HEADERS = KEY ? { Authorization: `Bearer ${KEY}` } : undefined;

function newId() {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return Array.from(bytes, b => b.toString(16).padStart(2, '0')).join('');
}

function chatOfUrl() {
  const params = new URLSearchParams(location.search);
  let id = params.get('chat');
  if (!id) {
    id = newId();
    params.set('chat', id);
    history.replaceState(null, '', `?${params}`);
  }
  let options;
  let problem = null;
  try {
    options = params.has('body') ? JSON.parse(params.get('body')) : undefined;
  } catch (error) {
    problem = `?body is not JSON: ${error.message}`;
  }
  return { id, options, problem };
}

function load(id) {
  try {
    return JSON.parse(localStorage.getItem(STORE + id)) ?? [];
  } catch {
    return [];
  }
}

const ENDED = ['succeeded', 'failed', 'dead', 'cancelled'];

// The message of an answer whose job ended, as its stream would have ended it.
function filledIn(message, job) {
  const metadata = { ...message.metadata, jobId: job.id, status: job.status, attempts: job.attempts };
  const usage = job.result?.usage;
  if (usage) {
    const total = usage.input_tokens + usage.output_tokens;
    metadata.usage = { inputTokens: usage.input_tokens, outputTokens: usage.output_tokens, totalTokens: total };
    metadata.costUsd = usage.cost;
  }
  if (job.status !== 'succeeded') return { ...message, metadata };
  const parts = message.parts.filter(part => part.type !== 'text');
  return { ...message, metadata, parts: [...parts, { type: 'text', text: job.result.text, state: 'done' }] };
}

function textOf(message) {
  return message.parts.filter(part => part.type === 'text').map(part => part.text).join('');
}

function Meta({ metadata }) {
  if (!metadata?.status) return null;
  const parts = [metadata.status];
  if (metadata.usage) parts.push(`${metadata.usage.totalTokens} tokens`);
  if (metadata.costUsd != null) parts.push(`$${metadata.costUsd}`);
  if (metadata.attempts > 1) parts.push(`${metadata.attempts} attempts`);
  return <div className="meta" data-testid="meta">{parts.join(' · ')}</div>;
}

function Message({ message }) {
  const progress = message.parts.findLast(part => part.type === 'data-progress');
  return (
    <li className="message" data-testid="message" data-role={message.role} data-id={message.id}>
      <div className="role">{message.role}</div>
      {progress && (
        <progress value={progress.data.fraction} max="1" aria-label={progress.data.message ?? 'progress'} />
      )}
      <div className="text" data-testid="text">{textOf(message)}</div>
      <Meta metadata={message.metadata} />
    </li>
  );
}

function Chat({ chat }) {
  const resumeWanted = useRef(false);
  const [input, setInput] = useState('');
  const transport = useMemo(
    () => new DefaultChatTransport({ api: '/api/chat', headers: HEADERS, body: chat.options }),
    [chat],
  );
  const { messages, setMessages, sendMessage, status, error, stop, resumeStream } = useChat({
    id: chat.id,
    messages: load(chat.id),
    resume: true,
    transport,
    onData: part => {
      if (part.type === 'data-resume') resumeWanted.current = true;
    },
  });

  useEffect(() => {
    localStorage.setItem(STORE + chat.id, JSON.stringify(messages));
  }, [chat, messages]);

  useEffect(() => {
    // After the error that a data-resume announced: the job goes on, reconnect to it.
    if (status === 'error' && resumeWanted.current) {
      resumeWanted.current = false;
      resumeStream();
    }
  }, [status, resumeStream]);

  useEffect(() => {
    // Idle with an incomplete answer: nothing streams it, so ask its job until it has ended.
    const last = messages.findLast(message => message.role === 'assistant');
    if (status !== 'ready' || !last || last.metadata?.status) return undefined;
    let stopped = false;
    (async () => {
      while (!stopped) {
        const answer = await fetch(`/api/jobs/${encodeURIComponent(last.id)}`, { headers: HEADERS });
        if (!answer.ok) return; // not a job of ours (or gone): leave the message as it is
        const job = await answer.json();
        if (stopped) return;
        if (ENDED.includes(job.status)) {
          setMessages(all => all.map(message => (message.id === last.id ? filledIn(message, job) : message)));
          return;
        }
        await new Promise(resolve => setTimeout(resolve, 1000));
      }
    })();
    return () => {
      stopped = true;
    };
  }, [status, messages, setMessages]);

  const busy = status === 'submitted' || status === 'streaming';

  async function onSubmit(event) {
    event.preventDefault();
    const text = input.trim();
    if (!text || busy) return;
    setInput('');
    await sendMessage({ text });
  }

  async function onStop() {
    // Cancel the job first, then hang up: the stream may still tell the cancel's end.
    await fetch(`/api/chat/${encodeURIComponent(chat.id)}/stop`, { method: 'POST', headers: HEADERS });
    await stop();
  }

  return (
    <main>
      <header>
        <h1>jobstream chat</h1>
        <a href="/chat/">New chat</a>
        <a href="/">Jobs</a>
      </header>
      <p className="note">
        useChat with resume: reload mid-answer and it picks up where the job is.
      </p>
      {chat.problem && <p className="error" role="alert">{chat.problem}</p>}
      <ol className="messages" data-testid="messages" aria-live="polite">
        {messages.map(message => <Message key={message.id} message={message} />)}
      </ol>
      <p className="status" data-testid="status" data-status={status}>{status}</p>
      {error && status === 'error' && !resumeWanted.current && (
        <p className="error" role="alert" data-testid="error">{error.message}</p>
      )}
      <form onSubmit={onSubmit}>
        <div>
          <input
            aria-label="Message"
            data-testid="prompt"
            value={input}
            onChange={event => setInput(event.target.value)}
            placeholder="Ask something"
          />
          {busy ? (
            <button type="button" className="stop" data-testid="stop" onClick={onStop}>Stop</button>
          ) : (
            <button type="submit" data-testid="send" disabled={!input.trim()}>Send</button>
          )}
        </div>
      </form>
    </main>
  );
}

createRoot(document.getElementById('root')).render(<Chat chat={chatOfUrl()} />);
