// protocol.mjs - reading the server's two text formats, shared by the e2e suite and the soak generator.

// An SSE body as a list of { event, data } (event "message" when the block names none).
export function parseSSE(text) {
  const out = [];
  for (const block of text.split('\n\n')) {
    if (!block.trim()) continue;
    let ev = 'message', data = '';
    for (const l of block.split('\n')) {
      if (l.startsWith('event: ')) ev = l.slice(7);
      else if (l.startsWith('data: ')) data += l.slice(6);
    }
    out.push({ event: ev, data });
  }
  return out;
}

// Prometheus text as { name: value }, labels dropped (the first sample of a name wins); a sample
// with a kind="K" label is also kept under "name:K".
export function parseMetrics(text) {
  const m = {};
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const sp = line.lastIndexOf(' ');
    const full = line.slice(0, sp), value = Number(line.slice(sp + 1));
    const name = full.replace(/\{.*\}$/, '');
    if (!(name in m)) m[name] = value;
    const kind = /kind="([a-z_]+)"/.exec(full);
    if (kind && !(`${name}:${kind[1]}` in m)) m[`${name}:${kind[1]}`] = value;
  }
  return m;
}
