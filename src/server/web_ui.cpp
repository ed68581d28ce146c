#include "server/web_ui.h"

namespace kvasir::server {

namespace {

// Element ids (#input, #send, #stop, #log, #stats) are what the browser test drives.
constexpr std::string_view kPage = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>kvasir</title>
<style>
  body { font: 15px/1.45 system-ui, sans-serif; margin: 0; display: flex; flex-direction: column; height: 100vh; }
  header { padding: 8px 14px; background: #1d2533; color: #eee; display: flex; gap: 14px; align-items: center; flex-wrap: wrap; }
  header b { font-size: 17px; }
  header label { font-size: 13px; }
  header input { width: 70px; }
  header input#key { width: 140px; }
  #log { flex: 1; overflow-y: auto; padding: 14px; background: #f5f6f8; }
  .msg { max-width: 80ch; margin: 8px 0; padding: 8px 12px; border-radius: 8px; white-space: pre-wrap; }
  .user { background: #d7e7ff; margin-left: auto; }
  .assistant { background: #fff; border: 1px solid #ddd; }
  .error { background: #ffe0e0; }
  footer { display: flex; gap: 8px; padding: 10px; border-top: 1px solid #ccc; }
  textarea { flex: 1; height: 48px; font: inherit; }
  #stats { font-size: 13px; color: #555; padding: 0 14px 6px; min-height: 18px; }
</style>
</head>
<body>
<header>
  <b>kvasir</b><span id="model">…</span>
  <label>max tokens <input id="max_tokens" type="number" value="256" min="1"></label>
  <label>temperature <input id="temperature" type="number" value="0.7" step="0.1" min="0" max="2"></label>
  <label>API key <input id="key" type="password" placeholder="(none)"></label>
  <button id="clear">clear</button>
</header>
<div id="log"></div>
<div id="stats"></div>
<footer>
  <textarea id="input" placeholder="Say something (Enter sends, Shift+Enter for a new line)"></textarea>
  <button id="send">Send</button><button id="stop" disabled>Stop</button>
</footer>
<script>
const $ = (id) => document.getElementById(id);
const history = [];
let controller = null;

$('key').value = localStorage.getItem('kvasir_key') || '';
$('key').onchange = () => localStorage.setItem('kvasir_key', $('key').value);
function headers() {
  const h = { 'Content-Type': 'application/json' };
  if ($('key').value) h['Authorization'] = 'Bearer ' + $('key').value;
  return h;
}
fetch('/v1/models', { headers: headers() }).then(r => r.json()).then(j => {
  $('model').textContent = j.data ? j.data[0].id : (j.error ? j.error.message : '');
}).catch(() => {});

function bubble(cls, text) {
  const d = document.createElement('div');
  d.className = 'msg ' + cls;
  d.textContent = text;
  $('log').appendChild(d);
  $('log').scrollTop = $('log').scrollHeight;
  return d;
}

async function send() {
  const text = $('input').value.trim();
  if (!text || controller) return;
  $('input').value = '';
  history.push({ role: 'user', content: text });
  bubble('user', text);
  const out = bubble('assistant', '');
  controller = new AbortController();
  $('send').disabled = true; $('stop').disabled = false;
  const body = {
    messages: history, stream: true, stream_options: { include_usage: true },
    max_tokens: parseInt($('max_tokens').value) || 256,
    temperature: parseFloat($('temperature').value) || 0,
  };
  const t0 = performance.now();
  let tFirst = 0, chunks = 0, usage = null, answer = '';
  try {
    const res = await fetch('/v1/chat/completions', {
      method: 'POST', headers: headers(), body: JSON.stringify(body), signal: controller.signal });
    if (!res.ok) {
      const j = await res.json().catch(() => ({}));
      throw new Error((j.error && j.error.message) || res.statusText);
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf('\n\n')) >= 0) {  // one SSE event per blank-line-terminated block
        const event = buf.slice(0, cut); buf = buf.slice(cut + 2);
        for (const line of event.split('\n')) {
          if (!line.startsWith('data: ')) continue;
          const data = line.slice(6);
          if (data === '[DONE]') continue;
          const j = JSON.parse(data);
          if (j.usage) usage = j.usage;
          const c = j.choices && j.choices[0];
          const piece = c && c.delta && c.delta.content;
          if (piece) {
            if (!tFirst) tFirst = performance.now();
            chunks++;
            answer += piece;
            out.textContent = answer;
            $('log').scrollTop = $('log').scrollHeight;
            const secs = (performance.now() - tFirst) / 1000;
            if (secs > 0) $('stats').textContent = (chunks / secs).toFixed(1) + ' tokens/s';
          }
        }
      }
    }
    const tokens = usage ? usage.completion_tokens : chunks;
    const genSecs = tFirst ? (performance.now() - tFirst) / 1000 : 0;
    $('stats').textContent = tokens + ' tokens, ' +
      (genSecs > 0 ? (Math.max(tokens - 1, 0) / genSecs).toFixed(1) : '–') + ' tokens/s, first token after ' +
      ((tFirst || performance.now()) - t0).toFixed(0) + ' ms' +
      (usage ? ', prompt ' + usage.prompt_tokens + ' tokens' : '');
    history.push({ role: 'assistant', content: answer });
  } catch (e) {
    if (e.name !== 'AbortError') { out.className = 'msg error'; out.textContent = String(e.message || e); }
    else if (answer) history.push({ role: 'assistant', content: answer });
  } finally {
    controller = null;
    $('send').disabled = false; $('stop').disabled = true;
  }
}

$('send').onclick = send;
$('stop').onclick = () => controller && controller.abort();
$('clear').onclick = () => { history.length = 0; $('log').innerHTML = ''; $('stats').textContent = ''; };
$('input').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); send(); }
});
</script>
</body>
</html>
)HTML";

}  // namespace

std::string_view web_ui_html() { return kPage; }

}  // namespace kvasir::server
