// run.mjs ROOT [--serve-memory-mib N] [--version V]
// Checks ROOT's Dockerfile and deploy/kubernetes (checks.mjs): every check must pass. Then each
// fixture in fixtures/ breaks one thing in a copy of those files, and the checks must fail
// with the message the fixture expects: a check that cannot fail is no check.
// Prints "ok NAME" / "FAIL NAME: why" and ends with "RESULT passed=N failed=M".
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import YAML from "yaml";
import { checkTree } from "./checks.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const argv = process.argv.slice(2);
const root = argv[0];
const opt = (flag) => { const i = argv.indexOf(flag); return i > 0 ? argv[i + 1] : undefined; };
const opts = { serveMemoryMiB: Number(opt("--serve-memory-mib")) || undefined, version: opt("--version") };
let passed = 0, failed = 0;
const report = (name, ok, msg) => {
  if (ok) { passed++; console.log(`ok ${name}`); } else { failed++; console.log(`FAIL ${name}: ${msg}`); }
};

for (const c of await checkTree(root, opts)) report(c.name, c.ok, c.msg);

// the files a fixture may break, copied into a scratch tree
const FILES = ["Dockerfile", ".dockerignore", "Makefile", ...fs.readdirSync(path.join(root, "deploy/kubernetes"))
  .map((f) => `deploy/kubernetes/${f}`)];

function setPath(obj, dotted, value) {   // "a.b.0.c" -> obj.a.b[0].c = value (null deletes)
  const keys = dotted.split(".");
  let o = obj;
  for (const k of keys.slice(0, -1)) {
    if (o[k] === undefined) throw new Error(`fixture path ${dotted}: no ${k}`);
    o = o[k];
  }
  const last = keys[keys.length - 1];
  if (value === null) Array.isArray(o) ? o.splice(Number(last), 1) : delete o[last];
  else o[last] = value;
}

const fixtures = fs.readdirSync(path.join(HERE, "fixtures")).filter((f) => f.endsWith(".yaml")).sort();
for (const f of fixtures) {
  const fx = YAML.parse(fs.readFileSync(path.join(HERE, "fixtures", f), "utf8"));
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "deploy-fixture-"));
  try {
    for (const rel of FILES) {
      fs.mkdirSync(path.dirname(path.join(tmp, rel)), { recursive: true });
      fs.copyFileSync(path.join(root, rel), path.join(tmp, rel));
    }
    const target = path.join(tmp, fx.file);
    const text = fs.readFileSync(target, "utf8");
    if (fx.replace) {   // [from, to], or a list of them
      let out = text;
      for (const [from, to] of Array.isArray(fx.replace[0]) ? fx.replace : [fx.replace]) {
        if (!out.includes(from)) throw new Error(`fixture ${f}: '${from}' is not in ${fx.file}`);
        out = out.replace(from, to);
      }
      fs.writeFileSync(target, out);
    } else {
      const docs = YAML.parseAllDocuments(text).map((d) => d.toJSON());
      const doc = docs.find((d) => !fx.kind || d.kind === fx.kind);
      for (const [k, v] of Object.entries(fx.set || {})) setPath(doc, k, v);
      fs.writeFileSync(target, docs.map((d) => YAML.stringify(d)).join("---\n"));
    }
    const failures = (await checkTree(tmp, opts)).filter((c) => !c.ok);
    const hit = failures.find((c) => c.msg.includes(fx.expect));
    report(`fixture ${f.replace(/\.yaml$/, "")} is refused`, hit,
           failures.length ? `failed, but not with '${fx.expect}': ${failures.map((c) => c.msg).join(" | ")}`
                           : "every check passed on the broken copy");
  } catch (e) {
    report(`fixture ${f.replace(/\.yaml$/, "")} is refused`, false, String(e.message || e));
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}
console.log(`RESULT passed=${passed} failed=${failed}`);
process.exit(failed ? 1 : 0);
