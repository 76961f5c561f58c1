// checks.mjs - offline checks of the container image's Dockerfile and the Kubernetes manifests
// under deploy/kubernetes, run on a source tree (the repository, or a copy with one thing broken).
//
// Schemas: the Kubernetes kinds are validated by kubernetes-models (the API's OpenAPI schemas
// compiled to validators, shipped in the npm package); the InferencePool, llm-d's
// EndpointPickerConfig and the Kustomization by the JSON schemas in schemas/, written here from
// those projects' API references since none is packaged. Then what no schema sees: that the
// pieces agree with each other (labels, ports, the event block, the model name, the memory
// `deltaserve info` asks for).
//
// checkTree(root, opts) returns [{name, ok, msg}]; opts.serveMemoryMiB: the bound `deltaserve
// info` prints for the image's model (the memory limit must hold it); opts.version: the version
// the image is tagged with (src/common/version.h).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import Ajv from "ajv";
import YAML from "yaml";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ajv = new Ajv({ allErrors: true, strict: false });
const schema = (f) => ajv.compile(JSON.parse(fs.readFileSync(path.join(HERE, "schemas", f), "utf8")));
const CRD_SCHEMAS = {
  "inference.networking.k8s.io/v1 InferencePool": schema("inferencepool-v1.schema.json"),
};
const validateEpp = schema("endpointpickerconfig.schema.json");
const validateKustomization = schema("kustomization.schema.json");

class Results {
  constructor() { this.list = []; }
  check(name, ok, msg) { this.list.push({ name, ok: !!ok, msg: ok ? "" : msg }); return !!ok; }
  fail(name, msg) { return this.check(name, false, msg); }
}

const ajvText = (errors) => (errors || []).map((e) => `${e.instancePath || "/"} ${e.message}`).join("; ");

// --- Kubernetes kinds through kubernetes-models ---

const SERVED = new Set(["v1", "apps/v1", "batch/v1", "autoscaling/v2", "policy/v1", "networking.k8s.io/v1",
                        "rbac.authorization.k8s.io/v1", "discovery.k8s.io/v1"]);

async function validateKubernetes(doc) {
  const { apiVersion, kind } = doc;
  const crd = CRD_SCHEMAS[`${apiVersion} ${kind}`];
  if (crd) return crd(doc) ? null : ajvText(crd.errors);
  if (typeof apiVersion !== "string" || typeof kind !== "string" || !/^[A-Za-z0-9.\/-]+$/.test(apiVersion + kind))
    return `no apiVersion/kind`;
  // kubernetes-models also keeps the schemas of removed versions (apps/v1beta1...): refuse those
  if (!SERVED.has(apiVersion))
    return `no schema for apiVersion ${apiVersion} kind ${kind}: not a stable API version current Kubernetes serves`;
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : [null, apiVersion];
  let Model;
  try {
    Model = (await import(`kubernetes-models/${group ? group + "/" : ""}${version}/${kind}`))[kind];
  } catch {
    return `no schema for apiVersion ${apiVersion} kind ${kind} (not a Kubernetes API this check knows)`;
  }
  try {
    new Model(doc).validate();
    return null;
  } catch (e) {
    return String(e.message || e);
  }
}

// --- helpers over the parsed manifests ---

const labelsMatch = (selector, labels) =>
  !!selector && Object.keys(selector).length > 0 &&
  Object.entries(selector).every(([k, v]) => labels && labels[k] === v);

function argValue(args, flag) {
  const i = (args || []).indexOf(flag);
  return i >= 0 && i + 1 < args.length ? String(args[i + 1]) : null;
}

function portOf(container, port) {   // a probe's or Service's port: a name or a number
  const ports = container.ports || [];
  return typeof port === "string" ? ports.find((p) => p.name === port) : ports.find((p) => p.containerPort === port);
}

function mebibytes(q) {   // a Kubernetes memory quantity in MiB
  const m = /^([0-9.]+)(Ki|Mi|Gi|Ti|k|M|G|T)?$/.exec(String(q));
  if (!m) return NaN;
  const f = { Ki: 1 / 1024, Mi: 1, Gi: 1024, Ti: 1024 * 1024, k: 1e3 / 1048576, M: 1e6 / 1048576, G: 1e9 / 1048576,
              T: 1e12 / 1048576 }[m[2]] ?? 1 / 1048576;
  return Number(m[1]) * f;
}

// --- the manifests ---

export async function checkKubernetes(dir, opts, r) {
  const kfile = path.join(dir, "kustomization.yaml");
  if (!r.check("kustomization.yaml exists", fs.existsSync(kfile), `${kfile} is missing`)) return;
  const kust = YAML.parse(fs.readFileSync(kfile, "utf8"));
  if (!r.check("kustomization.yaml matches its schema", validateKustomization(kust),
               `kustomization.yaml: ${ajvText(validateKustomization.errors)}`)) return;
  const generated = (kust.configMapGenerator || []).flatMap((g) => g.files || []);
  const listed = new Set([...kust.resources, ...generated]);
  const missing = [...listed].filter((f) => !fs.existsSync(path.join(dir, f)));
  r.check("kustomization lists only files that exist", missing.length === 0, `listed but missing: ${missing.join(", ")}`);
  const unlisted = fs.readdirSync(dir).filter((f) => /\.ya?ml$/.test(f) && f !== "kustomization.yaml" && !listed.has(f));
  r.check("every manifest is in the kustomization", unlisted.length === 0,
          `not in kustomization.yaml (never applied): ${unlisted.join(", ")}`);

  const docs = [];
  for (const f of kust.resources) {
    const file = path.join(dir, f);
    if (!fs.existsSync(file)) continue;
    for (const d of YAML.parseAllDocuments(fs.readFileSync(file, "utf8"))) {
      if (d.errors.length) { r.fail(`${f} parses`, String(d.errors[0].message)); continue; }
      const obj = d.toJSON();
      if (!obj) continue;
      const err = await validateKubernetes(obj);
      r.check(`${f}: ${obj.kind || "?"} ${obj.metadata?.name || "?"} matches its schema`, !err, `${f}: ${err}`);
      docs.push({ file: f, obj });
    }
  }
  const ofKind = (k) => docs.filter((d) => d.obj.kind === k).map((d) => d.obj);
  const deployments = ofKind("Deployment");
  if (!r.check("one Deployment", deployments.length === 1, `found ${deployments.length} Deployments`)) return;
  const dep = deployments[0];
  const pod = dep.spec?.template || {};
  const podLabels = pod.metadata?.labels || {};
  const c = (pod.spec?.containers || [])[0];
  if (!r.check("the Deployment has a container", c, "no container")) return;

  r.check("Deployment: its selector matches its pod labels", labelsMatch(dep.spec?.selector?.matchLabels, podLabels),
          `selector ${JSON.stringify(dep.spec?.selector?.matchLabels)} does not match the pod labels ${JSON.stringify(podLabels)}`);

  // probes: present, on ports the container exposes, readiness and start-up on /health
  for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
    const p = c[probe];
    if (!r.check(`Deployment: ${probe} present`, p || probe === "startupProbe", `the container has no ${probe}`) || !p)
      continue;
    const target = p.httpGet || p.tcpSocket;
    r.check(`Deployment: ${probe} port is a container port`, target && portOf(c, target.port),
            `${probe} port ${JSON.stringify(target?.port)} names no port of container '${c.name}'`);
    if (probe !== "livenessProbe")
      r.check(`Deployment: ${probe} asks /health`, p.httpGet?.path === "/health",
              `${probe} asks ${JSON.stringify(p.httpGet?.path)}, not /health (200 only when the model is loaded and not draining)`);
  }
  const httpPort = portOf(c, "http");
  r.check("Deployment: the container exposes http on 8080 (the image's --port)", httpPort?.containerPort === 8080,
          `container port 'http' is ${JSON.stringify(httpPort?.containerPort)}, the image serves 8080`);

  // KV events: the endpoint's port is published, and so are the ports of the other data-parallel ranks
  const args = (c.args || []).map(String);
  const endpoint = argValue(args, "--kv-events-endpoint");
  const evPort = endpoint && Number(/:(\d+)$/.exec(endpoint)?.[1]);
  const dp = Number(argValue(args, "--data-parallel") || 1);
  r.check("Deployment: --kv-events-endpoint is a tcp endpoint", evPort > 0, `--kv-events-endpoint is ${JSON.stringify(endpoint)}`);
  for (let rank = 0; rank < dp && evPort > 0; rank++)
    r.check(`Deployment: KV events port ${evPort + rank} (rank ${rank}) is a container port`, portOf(c, evPort + rank),
            `--kv-events-endpoint ${endpoint}: rank ${rank} publishes on ${evPort + rank}, which the container does not expose`);
  // the topic kv@<host>:<port>@<model> must name the pod as llm-d knows it: its IP and the HTTP port
  const podIp = (c.env || []).find((e) => e.name === "POD_IP");
  r.check("Deployment: POD_IP comes from the pod's IP (the KV events' topic host)",
          podIp?.valueFrom?.fieldRef?.fieldPath === "status.podIP",
          "the container must set POD_IP from status.podIP: with the image's --host 0.0.0.0 the server names itself by $POD_IP in its KV events' topic, which llm-d matches to the pod's address");
  const portArg = argValue(args, "--port");
  r.check("Deployment: the server's --port is the container's http port", portArg === null || Number(portArg) === httpPort?.containerPort,
          `args pass --port ${portArg}, the container's http port is ${httpPort?.containerPort}`);
  const interval = argValue(args, "--state-checkpoint-interval");
  r.check("Deployment: passes --state-checkpoint-interval (the event block)", interval !== null && Number(interval) > 0,
          "the Deployment must pass --state-checkpoint-interval N > 0: it is the event block the picker must use");

  // resources: CPU threads and memory from `deltaserve info`
  const res = c.resources || {};
  const limitMiB = mebibytes(res.limits?.memory), requestMiB = mebibytes(res.requests?.memory);
  r.check("Deployment: memory request and limit set", limitMiB > 0 && requestMiB > 0 && requestMiB <= limitMiB,
          `memory request ${res.requests?.memory}, limit ${res.limits?.memory}`);
  if (opts.serveMemoryMiB)
    r.check("Deployment: memory limit holds what `deltaserve info` says serve may hold", limitMiB >= opts.serveMemoryMiB,
            `memory limit ${res.limits?.memory} is below the ${opts.serveMemoryMiB} MiB that \`deltaserve info\` prints for the image's model`);
  const threads = argValue(args, "--threads");
  r.check("Deployment: --threads equals the CPU limit", threads !== null && Number(threads) === Number(res.limits?.cpu),
          `--threads ${threads} but the CPU limit is ${res.limits?.cpu}`);

  // the image: the one the kustomization tags, at the version `make container` builds
  const img = (kust.images || []).find((i) => i.name === c.image);
  r.check("kustomization: tags the container's image", img, `no images entry named '${c.image}'`);
  if (img && opts.version)
    r.check("kustomization: image tag is the version", img.newTag === opts.version,
            `image tag ${img.newTag}, version ${opts.version}`);

  // Services: select the pods, target their ports
  const services = ofKind("Service");
  r.check("a Service", services.length >= 1, "no Service");
  for (const s of services) {
    r.check(`Service ${s.metadata?.name}: selects the Deployment's pods`, labelsMatch(s.spec?.selector, podLabels),
            `selector ${JSON.stringify(s.spec?.selector)} does not match the pod labels ${JSON.stringify(podLabels)}`);
    for (const p of s.spec?.ports || [])
      r.check(`Service ${s.metadata?.name}: port ${p.name || p.port} targets a container port`,
              portOf(c, p.targetPort ?? p.port),
              `port ${p.port} targets ${JSON.stringify(p.targetPort)}, which names no port of container '${c.name}'`);
  }

  // the InferencePool: selects the pods, routes to the HTTP port
  for (const pool of ofKind("InferencePool")) {
    r.check(`InferencePool ${pool.metadata?.name}: selects the Deployment's pods`,
            labelsMatch(pool.spec?.selector?.matchLabels, podLabels),
            `selector ${JSON.stringify(pool.spec?.selector?.matchLabels)} does not match the pod labels ${JSON.stringify(podLabels)}`);
    const ports = (pool.spec?.targetPorts || []).map((p) => p.number);
    r.check(`InferencePool ${pool.metadata?.name}: the first target port is the HTTP port`, ports[0] === httpPort?.containerPort,
            `targetPorts ${ports[0]}, the container serves HTTP on ${httpPort?.containerPort}`);
    // more target ports: the data-parallel ranks' HTTP ports, each an endpoint of its own
    for (const n of ports.slice(1))
      r.check(`InferencePool ${pool.metadata?.name}: target port ${n} is a container port`, portOf(c, n),
              `targetPorts ${n} names no port of container '${c.name}'`);
  }

  // the endpoint picker's configuration
  for (const f of generated) {
    const file = path.join(dir, f);
    if (!fs.existsSync(file)) continue;
    const epp = YAML.parse(fs.readFileSync(file, "utf8"));
    if (!r.check(`${f}: EndpointPickerConfig matches its schema`, validateEpp(epp), `${f}: ${ajvText(validateEpp.errors)}`))
      continue;
    checkPicker(f, epp, { c, args, podLabels, evPort, interval, services, r });
  }
}

function checkPicker(f, epp, { c, args, podLabels, evPort, interval, services, r }) {
  const names = new Set(epp.plugins.map((p) => p.name || p.type));
  const refs = [...epp.schedulingProfiles.flatMap((s) => s.plugins.map((p) => p.pluginRef)),
                ...(epp.dataLayer?.sources || []).flatMap((s) => [s.pluginRef, ...(s.extractors || []).map((e) => e.pluginRef)])];
  const dangling = refs.filter((x) => !names.has(x));
  r.check(`${f}: every pluginRef names a plugin`, dangling.length === 0, `pluginRef to no plugin: ${dangling.join(", ")}`);

  const scorer = epp.plugins.find((p) => p.type === "precise-prefix-cache-scorer");
  if (!r.check(`${f}: precise-prefix-cache-scorer configured`, scorer, "no precise-prefix-cache-scorer plugin")) return;
  const tp = scorer.parameters?.tokenProcessorConfig || {};
  // older releases read blockSize, newer ones blockSizeTokens (and blockSize when it is alone): each given must agree
  const sizes = ["blockSize", "blockSizeTokens"].filter((k) => k in tp);
  const wrong = sizes.filter((k) => String(tp[k]) !== String(interval));
  r.check(`${f}: block size is the Deployment's --state-checkpoint-interval`, sizes.length > 0 && wrong.length === 0,
          sizes.length ? `${wrong.map((k) => `${k} ${tp[k]}`).join(", ")} but the Deployment passes --state-checkpoint-interval ${interval}: a hybrid model announces one block per checkpoint interval`
                       : "tokenProcessorConfig sets no blockSize: llm-d's default (16) is not the event block");
  r.check(`${f}: hashSeed set`, typeof tp.hashSeed === "string", "tokenProcessorConfig.hashSeed is not set");
  const ev = scorer.parameters?.kvEventsConfig || {};
  r.check(`${f}: topic filter lets our topics through`, typeof ev.topicFilter === "string" && "kv@".startsWith(ev.topicFilter),
          `topicFilter ${JSON.stringify(ev.topicFilter)} is not a prefix of the topics "kv@<host>:<port>@<model>"`);
  if (ev.discoverPods) {
    const pd = ev.podDiscoveryConfig || {};
    const socketPort = pd.socketPort ?? 5557;
    r.check(`${f}: subscribes to the port the container publishes KV events on`,
            socketPort === evPort && portOf(c, socketPort),
            `podDiscoveryConfig.socketPort ${socketPort}, but the container publishes on ${evPort} (--kv-events-endpoint)`);
    const sel = Object.fromEntries(String(pd.podLabelSelector || "").split(",").filter(Boolean).map((kv) => kv.split("=")));
    r.check(`${f}: pod discovery selects the Deployment's pods`, labelsMatch(sel, podLabels),
            `podLabelSelector ${JSON.stringify(pd.podLabelSelector)} does not match the pod labels ${JSON.stringify(podLabels)}`);
  } else {
    r.check(`${f}: KV events endpoint set`, ev.zmqEndpoint, "kvEventsConfig needs discoverPods or a zmqEndpoint");
  }
  const producer = epp.plugins.find((p) => p.type === "token-producer" || p.type === "tokenizer");
  if (producer) {
    const served = argValue(args, "--served-model-name") || "default";
    r.check(`${f}: token producer names the served model`, producer.parameters.modelName === served,
            `modelName ${producer.parameters.modelName}, the replicas serve '${served}'`);
    if (producer.parameters.vllm) {
      const u = new URL(producer.parameters.vllm.http);
      const svc = services.find((s) => s.metadata?.name === u.hostname.split(".")[0]);
      const sp = svc?.spec?.ports?.find((p) => p.port === Number(u.port || 80));
      r.check(`${f}: renders come from the replicas' HTTP port`, sp && portOf(c, sp.targetPort ?? sp.port)?.name === "http",
              `vllm.http ${u.href} is not a Service port that reaches the container's http port`);
    }
  }
}

// --- the Dockerfile ---

function dockerInstructions(text) {   // [{op, args, line}], continuation lines joined, comments dropped
  const out = [];
  let cur = null;
  text.split("\n").forEach((raw, i) => {
    const line = raw.trimEnd();
    if (!cur && (/^\s*#/.test(line) || !line.trim())) return;
    if (cur && /^\s*#/.test(line)) return;
    const body = line.endsWith("\\") ? line.slice(0, -1) : line;
    if (cur) cur.text += " " + body.trim();
    else cur = { text: body.trim(), line: i + 1 };
    if (!line.endsWith("\\")) {
      const m = /^(\S+)\s*(.*)$/.exec(cur.text);
      out.push({ op: m[1].toUpperCase(), args: m[2], line: cur.line });
      cur = null;
    }
  });
  return out;
}

function execForm(args) {
  try { const v = JSON.parse(args); return Array.isArray(v) ? v : null; } catch { return null; }
}

function makeRecipe(makefile, target) {   // the recipe lines of a rule in the Makefile
  const lines = makefile.split("\n");
  const i = lines.findIndex((l) => new RegExp(`^${target}\\s*:`).test(l));
  const out = [];
  for (let j = i + 1; i >= 0 && j < lines.length && lines[j].startsWith("\t"); j++) out.push(lines[j].trim().replace(/^@/, ""));
  return out;
}

export function checkDockerfile(root, r) {
  const file = path.join(root, "Dockerfile");
  if (!r.check("Dockerfile exists", fs.existsSync(file), "no Dockerfile at the repository root")) return;
  const ins = dockerInstructions(fs.readFileSync(file, "utf8"));
  const froms = ins.filter((x) => x.op === "FROM");
  r.check("Dockerfile: every stage is Debian bookworm, tag pinned", froms.length > 0 &&
          froms.every((x) => /^(--\S+\s+)*debian:bookworm[-\w.]*(@sha256:[0-9a-f]{64})?(\s+AS\s+\S+)?$/i.test(x.args)),
          `FROM ${froms.map((x) => x.args).join(" / ")}: the base must be debian:bookworm with a tag`);
  const last = ins.lastIndexOf(froms[froms.length - 1]);
  const final = ins.slice(last);
  const build = ins.slice(0, last);

  // the README's set-up and build: `make run` = deps (the set-up script) then the `all` target
  const makefile = fs.readFileSync(path.join(root, "Makefile"), "utf8");
  const setup = makeRecipe(makefile, "deps").find((l) => /setup\.sh/.test(l));
  const runBuild = makeRecipe(makefile, "run").find((l) => /\$\(MAKE\)/.test(l));
  const target = runBuild && runBuild.replace("$(MAKE)", "").trim();
  const runs = build.filter((x) => x.op === "RUN").map((x) => x.args);
  r.check("Dockerfile: runs the set-up `make deps` runs", setup && runs.some((a) => a.includes(setup.replace(/^bash /, ""))),
          `no RUN of ${JSON.stringify(setup)} (the Makefile's deps recipe) in the build stage`);
  r.check("Dockerfile: builds what `make run` builds", target &&
          runs.some((a) => new RegExp(`(^|&&|;)\\s*make( -j\\S+)? ${target}(\\s|$)`).test(a)),
          `no RUN of \`make ${target}\` (what the Makefile's run recipe builds) in the build stage`);

  // apt lists cleaned wherever packages are installed
  for (const x of ins.filter((y) => y.op === "RUN" && /(apt-get install|setup\.sh)/.test(y.args)))
    r.check(`Dockerfile: apt lists removed (line ${x.line})`, /rm -rf \/var\/lib\/apt\/lists/.test(x.args),
            `line ${x.line} installs packages but leaves /var/lib/apt/lists behind`);

  // the final stage: a non-root user before the entrypoint, /health checked with a tool that is there
  const users = final.filter((x) => x.op === "USER");
  const entry = final.find((x) => x.op === "ENTRYPOINT");
  const user = users[users.length - 1];
  r.check("Dockerfile: runs as a non-root user", user && !/^(0|root)(:|$)/.test(user.args.trim()),
          `the final stage's user is ${user ? user.args : "root (no USER)"}`);
  r.check("Dockerfile: USER comes before ENTRYPOINT", user && entry && final.indexOf(user) < final.indexOf(entry),
          "USER must be set before ENTRYPOINT");
  const hc = final.find((x) => x.op === "HEALTHCHECK");
  const hcCmd = hc && execForm(hc.args.replace(/^.*?\bCMD\s+/, ""));
  r.check("Dockerfile: HEALTHCHECK asks /health", hcCmd && hcCmd.some((a) => /^http:\/\/(127\.0\.0\.1|localhost):8080\/health$/.test(a)),
          `HEALTHCHECK ${hc ? hc.args : "missing"}: must ask http://127.0.0.1:8080/health (exec form)`);
  const tool = hcCmd && hcCmd[0];
  const installs = final.filter((x) => x.op === "RUN" && /apt-get install/.test(x.args)).map((x) => x.args).join(" ");
  r.check("Dockerfile: the health check's tool is installed in the image", tool && new RegExp(`\\b${tool}\\b`).test(installs),
          `HEALTHCHECK runs ${tool}, which no apt-get install of the final stage installs`);
  const ep = entry && execForm(entry.args);
  r.check("Dockerfile: ENTRYPOINT serves on 0.0.0.0:8080 (exec form)",
          ep && ep.includes("serve") && argValue(ep, "--host") === "0.0.0.0" && argValue(ep, "--port") === "8080",
          `ENTRYPOINT ${entry ? entry.args : "missing"}`);
  const exposed = final.filter((x) => x.op === "EXPOSE").flatMap((x) => x.args.split(/\s+/).map((p) => p.replace(/\/tcp$/, "")));
  r.check("Dockerfile: EXPOSE 8080 and 5557", exposed.includes("8080") && exposed.includes("5557"),
          `EXPOSE ${exposed.join(" ")}`);
  // `serve` finds models/default.gguf beside its binary
  const bin = ep && ep[0];
  const model = bin && path.posix.join(path.posix.dirname(bin), "models/default.gguf");
  r.check("Dockerfile: the default model sits beside the binary", model &&
          final.some((x) => x.op === "COPY" && x.args.trim().endsWith(" " + model)) &&
          final.some((x) => x.op === "COPY" && x.args.trim().endsWith(" " + bin)),
          `the final stage must COPY the binary to ${bin} and the model to ${model}`);
  const secrets = ins.filter((x) => /^(ENV|ARG)$/.test(x.op) && /(KEY|TOKEN|SECRET|PASSWORD)\w*\s*=?\s*\S/i.test(x.args));
  r.check("Dockerfile: no secrets in ENV or ARG", secrets.length === 0, `line ${secrets[0]?.line}: ${secrets[0]?.op} ${secrets[0]?.args}`);

  // .dockerignore keeps every file the build COPYs from the context
  const ig = path.join(root, ".dockerignore");
  const patterns = fs.existsSync(ig) ? fs.readFileSync(ig, "utf8").split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("#")) : [];
  const ignored = (p) => {   // the last matching pattern wins; "*" and "dir/" forms, as this file uses them
    let out = false;
    for (const pat of patterns) {
      const neg = pat.startsWith("!"), q = (neg ? pat.slice(1) : pat).replace(/\/$/, "");
      if (q === "*" || p === q || p.startsWith(q + "/")) out = !neg;
    }
    return out;
  };
  const sources = build.filter((x) => x.op === "COPY" && !/--from/.test(x.args))
    .flatMap((x) => x.args.split(/\s+/).slice(0, -1)).filter((s) => !s.startsWith("--"));
  const dropped = sources.filter((s) => ignored(s.replace(/^\.\//, "").replace(/\/$/, "")));
  r.check(".dockerignore: keeps what the build copies", dropped.length === 0, `.dockerignore leaves out ${dropped.join(", ")}`);
  r.check(".dockerignore: leaves the build folders out", ignored("build") && ignored("tests"),
          ".dockerignore must leave build/ and tests/ (node_modules) out of the context");
}

export async function checkTree(root, opts = {}) {
  const r = new Results();
  checkDockerfile(root, r);
  await checkKubernetes(path.join(root, "deploy", "kubernetes"), opts, r);
  return r.list;
}
