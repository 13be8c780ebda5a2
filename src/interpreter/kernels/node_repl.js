'use strict';
// The Node side of airlock's javascript/typescript kernel (js_kernel.py).
//
// Channels (all set up by js_kernel.py):
//   fd 3  (--request-fd=N) requests, one JSON object a line: {"id": n, "code": "..."}
//   fd 4  (--event-fd=N) events, one JSON object a line, written synchronously (so they stay
//         in order and arrive while a synchronous loop still runs):
//           {"type":"stream","name":"stdout"|"stderr","text":"..."}
//           {"type":"done","id":n,"status":"ok","result":"..."|null}
//           {"type":"done","id":n,"status":"error","ename","evalue","traceback":[...]}
//           {"type":"ready"} once at start
//   fd 5  (--interrupt-fd=N) a byte: stop the JavaScript running now (watchdog)
//   fd 1/2 whatever bypasses process.stdout/stderr (child processes, native
//         code); js_kernel.py forwards it as stdout/stderr.
//
// A cell runs in this process's own global context (like the Node REPL), so
// its state persists. Top-level declarations are rewritten (with the
// TypeScript parser) into assignments to global bindings, so `let`/`const`/
// `function`/`class` survive into later cells and re-running a cell does not
// fail with "already declared"; the cell becomes the body of an async arrow
// function, so top-level `await` works; the last expression statement is
// returned and becomes the result (util.inspect).
//
// SIGINT: while the cell's synchronous part runs, vm's breakOnSigint stops
// it; while the cell awaits, the SIGINT handler abandons it (the promise is
// left behind); a synchronous loop after an `await` (outside the vm call)
// is stopped by the watchdog thread (--interrupt-fd, below). If all that
// fails, js_kernel.py restarts this process.

const fs = require('fs');
const path = require('path');
const util = require('util');
const vm = require('vm');
const Module = require('module');

function FdArgument(name, fallback) {
  const arg = process.argv.find((a) => a.startsWith(`--${name}=`));
  return arg ? Number(arg.slice(name.length + 3)) : fallback;
}
const kRequestFd = FdArgument('request-fd', 3);
const kEventFd = FdArgument('event-fd', 4);
const kTypeScript = process.argv.includes('--typescript');
const kFramesToDrop = /node_repl\.js|\(node:|at node:/;

// References taken now, so user code that replaces globals cannot break us.
const JSONStringify = JSON.stringify;
const JSONParse = JSON.parse;
const ObjectKeys = Object.keys;

function Send(event) {
  const buf = Buffer.from(JSONStringify(event) + '\n', 'utf8');
  let off = 0;
  while (off < buf.length) {
    try {
      off += fs.writeSync(kEventFd, buf, off, buf.length - off);
    } catch (e) {
      if (e.code === 'EAGAIN' || e.code === 'EINTR') continue;
      process.exit(0);  // the kernel is gone
    }
  }
}

// console.* and process.stdout/stderr.write go over the event channel, in
// order with each other and with the result.
function RedirectStream(stream, name) {
  stream.write = function (chunk, encoding, callback) {
    if (typeof encoding === 'function') {
      callback = encoding;
      encoding = undefined;
    }
    const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString(encoding && encoding !== 'buffer' ? encoding : 'utf8');
    if (text.length > 0) Send({type: 'stream', name, text});
    if (typeof callback === 'function') process.nextTick(callback);
    return true;
  };
}
RedirectStream(process.stdout, 'stdout');
RedirectStream(process.stderr, 'stderr');

// The TypeScript compiler (Debian's node-typescript) parses both languages.
let ts = null;
for (const candidate of ['typescript', '/usr/share/nodejs/typescript', '/usr/lib/nodejs/typescript']) {
  try {
    ts = require(candidate);
    break;
  } catch (e) {}
}

// require() for user code: resolved from the current directory, then from
// the global module directories (npm -g, Debian's node-* packages).
const kGlobalDirs = [
  ...(process.env.NODE_PATH || '').split(':').filter(Boolean),
  '/usr/local/lib/node_modules', '/usr/lib/node_modules', '/usr/local/lib/nodejs',
  '/usr/share/nodejs', '/usr/lib/nodejs',
];
// A bare module name looked up as <dir>/<name> in each global directory.
function ResolveGlobal(id) {
  if (typeof id !== 'string' || id.startsWith('.') || path.isAbsolute(id)) return null;
  for (const dir of kGlobalDirs) {
    try {
      return require.resolve(path.join(dir, id));
    } catch (e) {}
  }
  return null;
}
function UserRequire(id) {
  const local = Module.createRequire(path.join(process.cwd(), '[airlock-cell].js'));
  try {
    return local(id);
  } catch (e) {
    if (e.code !== 'MODULE_NOT_FOUND') throw e;
    const resolved = ResolveGlobal(id);
    if (!resolved) throw e;
    return local(resolved);
  }
}
UserRequire.resolve = (id, options) => Module.createRequire(path.join(process.cwd(), '[airlock-cell].js')).resolve(id, options);
UserRequire.cache = Module._cache;
globalThis.require = UserRequire;

function ImportDynamically(specifier) {
  let target = specifier;
  if (!specifier.startsWith('node:') && !Module.builtinModules.includes(specifier)) {
    let resolved = null;
    try {
      resolved = UserRequire.resolve(specifier);
    } catch (e) {
      resolved = ResolveGlobal(specifier);
    }
    if (resolved) target = require('url').pathToFileURL(resolved).href;
  }
  return import(target);
}

// import() in a vm script needs --experimental-vm-modules (Node 20) or an
// experimental vm option (18); cells call this instead, which imports from here.
Object.defineProperty(globalThis, '__airlock_import', {value: ImportDynamically, enumerable: false});

// --- the rewrite -----------------------------------------------------------

// import(x) -> globalThis.__airlock_import(x), anywhere in the cell.
function RewriteImportCalls(code, cellName) {
  if (!/\bimport\s*\(/.test(code)) return code;
  const sf = ts.createSourceFile(cellName, code, ts.ScriptTarget.Latest, true, ts.ScriptKind.JS);
  const edits = [];
  const Visit = (node) => {
    if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      edits.push([node.expression.getStart(sf), node.expression.end]);
    }
    ts.forEachChild(node, Visit);
  };
  Visit(sf);
  edits.sort((a, b) => b[0] - a[0]);
  for (const [from, to] of edits) code = code.slice(0, from) + 'globalThis.__airlock_import' + code.slice(to);
  return code;
}

function BoundNames(name, out) {
  if (ts.isIdentifier(name)) {
    out.push(name.text);
  } else if (ts.isObjectBindingPattern(name) || ts.isArrayBindingPattern(name)) {
    for (const element of name.elements) {
      if (!ts.isOmittedExpression(element)) BoundNames(element.name, out);
    }
  }
}

function HasModifier(node, kind) {
  return !!(node.modifiers && node.modifiers.some((m) => m.kind === kind));
}

// Returns {hoisted: [names], body: text, functions: [names]} or throws a
// SyntaxError. `body` is the cell, rewritten, for the inside of an async
// arrow function; it keeps the cell's line numbers.
function Rewrite(code, cellName) {
  const sf = ts.createSourceFile(cellName, code, ts.ScriptTarget.Latest, true, ts.ScriptKind.JS);
  const diagnostics = sf.parseDiagnostics || [];
  if (diagnostics.length > 0) {
    const d = diagnostics[0];
    const {line, character} = sf.getLineAndCharacterOfPosition(d.start || 0);
    const error = new SyntaxError(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
    error.stack = `${cellName}:${line + 1}:${character + 1}\n${error.name}: ${error.message}`;
    throw error;
  }
  const edits = [];  // [start, end, text]
  const hoisted = [];
  const functions = [];
  const Assignments = (list) => {
    const parts = [];
    const isLet = (list.flags & (ts.NodeFlags.Let | ts.NodeFlags.Const)) !== 0;
    for (const d of list.declarations) {
      const names = [];
      BoundNames(d.name, names);
      hoisted.push(...names);
      if (d.initializer) {
        parts.push(`(${d.name.getText(sf)} = (${d.initializer.getText(sf)}))`);
      } else if (isLet) {
        parts.push(...names.map((n) => `(${n} = undefined)`));
      }
    }
    return parts.length ? `void (${parts.join(', ')});` : ';';
  };
  // `var` anywhere outside functions is hoisted to the cell's top scope,
  // which must be the global one.
  const VisitVars = (node) => {
    if (ts.isFunctionLike(node) || ts.isClassLike(node)) return;
    if (ts.isVariableStatement(node) && !(node.declarationList.flags & (ts.NodeFlags.Let | ts.NodeFlags.Const))) {
      edits.push([node.getStart(sf), node.end, Assignments(node.declarationList)]);
      return;
    }
    if ((ts.isForStatement(node) || ts.isForInStatement(node) || ts.isForOfStatement(node)) &&
        node.initializer && ts.isVariableDeclarationList(node.initializer) &&
        !(node.initializer.flags & (ts.NodeFlags.Let | ts.NodeFlags.Const))) {
      const list = node.initializer;
      const names = [];
      for (const d of list.declarations) BoundNames(d.name, names);
      hoisted.push(...names);
      // for (var i = 0, j;;) -> for (i = 0, j;;); for (var k of o) -> for (k of o)
      const text = ts.isForStatement(node) ? list.declarations.map((d) => d.getText(sf)).join(', ')
                                           : list.declarations[0].name.getText(sf);
      edits.push([list.getStart(sf), list.end, text]);
    }
    ts.forEachChild(node, VisitVars);
  };
  const statements = sf.statements;
  statements.forEach((st, i) => {
    const start = st.getStart(sf);
    if (ts.isVariableStatement(st)) {
      edits.push([start, st.end, Assignments(st.declarationList)]);
    } else if (ts.isFunctionDeclaration(st) && st.name && st.body) {
      functions.push(st.name.text);
      hoisted.push(st.name.text);
      if (st.modifiers) {
        const exported = st.modifiers.filter((m) => m.kind === ts.SyntaxKind.ExportKeyword || m.kind === ts.SyntaxKind.DefaultKeyword);
        for (const m of exported) edits.push([m.getStart(sf), m.end, '']);
      }
    } else if (ts.isClassDeclaration(st) && st.name) {
      hoisted.push(st.name.text);
      let from = start;
      if (HasModifier(st, ts.SyntaxKind.ExportKeyword)) {
        for (const m of st.modifiers) {
          if (m.kind === ts.SyntaxKind.ExportKeyword || m.kind === ts.SyntaxKind.DefaultKeyword) edits.push([m.getStart(sf), m.end, '']);
        }
        from = st.modifiers[st.modifiers.length - 1].end;
      }
      edits.push([from, from, `${st.name.text} = `]);
      edits.push([st.end, st.end, ';']);
    } else if (ts.isImportDeclaration(st)) {
      edits.push([start, st.end, RewriteImport(st, sf, hoisted)]);
    } else if (ts.isExportDeclaration(st) || ts.isExportAssignment(st)) {
      edits.push([start, st.end, ';']);
    } else if (i === statements.length - 1 && ts.isExpressionStatement(st)) {
      edits.push([start, st.end, `return [(${st.expression.getText(sf)})];`]);
    } else {
      ts.forEachChild(st, VisitVars);
    }
  });
  edits.sort((a, b) => b[0] - a[0] || b[1] - a[1]);
  let body = code;
  for (const [from, to, text] of edits) body = body.slice(0, from) + text + body.slice(to);
  return {hoisted: [...new Set(hoisted)], functions, body};
}

// import d, {a as b} from 'm'  ->  d = require('m').default ?? require('m'), b = ...
function RewriteImport(st, sf, hoisted) {
  const spec = st.moduleSpecifier.getText(sf);
  const clause = st.importClause;
  if (!clause) return `require(${spec});`;
  const parts = [];
  const mod = `__airlock_imported`;
  if (clause.name) {
    hoisted.push(clause.name.text);
    parts.push(`${clause.name.text} = (${mod} && ${mod}.__esModule ? ${mod}.default : ${mod})`);
  }
  const bindings = clause.namedBindings;
  if (bindings && ts.isNamespaceImport(bindings)) {
    hoisted.push(bindings.name.text);
    parts.push(`${bindings.name.text} = ${mod}`);
  } else if (bindings) {
    for (const el of bindings.elements) {
      const imported = (el.propertyName || el.name).text;
      hoisted.push(el.name.text);
      parts.push(`${el.name.text} = ${mod}[${JSONStringify(imported)}]`);
    }
  }
  return `{ const ${mod} = require(${spec}); ${parts.join('; ')}; }`;
}

function Transpile(code, cellName) {
  const out = ts.transpileModule(code, {
    fileName: cellName,
    reportDiagnostics: true,
    compilerOptions: {
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.ESNext,
      sourceMap: false,
      removeComments: false,
      esModuleInterop: true,
    },
  });
  if (out.diagnostics && out.diagnostics.length > 0) {
    const d = out.diagnostics[0];
    const error = new SyntaxError(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
    let where = cellName;
    if (d.file && d.start !== undefined) {
      const {line, character} = d.file.getLineAndCharacterOfPosition(d.start);
      where = `${cellName}:${line + 1}:${character + 1}`;
    }
    error.stack = `${where}\n${error.name}: ${error.message}`;
    throw error;
  }
  return out.outputText.replace(/\n\/\/# sourceMappingURL=.*$/, '');
}

// --- running cells ----------------------------------------------------------

let current = null;  // {id} of the running execution, or null

function ErrorEvent(id, err) {
  if (err instanceof Error || (err && typeof err === 'object' && 'stack' in err && 'message' in err)) {
    // Drop our frames and the one of the wrapper's last line ("})()").
    const wrapperFrame = current && current.wrapperLine ? `${current.cellName}:${current.wrapperLine}:` : null;
    const stack = String(err.stack || `${err.name}: ${err.message}`)
        .split('\n')
        .filter((line) => !(line.trim().startsWith('at ') &&
                            (kFramesToDrop.test(line) || (wrapperFrame && line.includes(wrapperFrame)))));
    return {type: 'done', id, status: 'error', ename: String(err.name || 'Error'), evalue: String(err.message), traceback: stack};
  }
  const text = util.inspect(err);
  return {type: 'done', id, status: 'error', ename: 'Error', evalue: `Uncaught ${text}`, traceback: [`Uncaught ${text}`]};
}

function Finish(id, event) {
  if (!current || current.id !== id) return;  // abandoned or already finished
  current = null;
  Send(event);
}

function Interrupted(id) {
  return {type: 'done', id, status: 'error', ename: 'KeyboardInterrupt', evalue: 'Execution interrupted (SIGINT)',
          traceback: ['KeyboardInterrupt: Execution interrupted (SIGINT)']};
}

let cellNumber = 0;

function Execute(id, code) {
  const cellName = `cell${++cellNumber}.${kTypeScript ? 'ts' : 'js'}`;
  current = {id, cellName, wrapperLine: 0};
  let promise;
  try {
    if (!ts) {
      // No parser: run as a plain script (no top-level await, no redeclaration).
      const value = new vm.Script(code, {filename: cellName})
          .runInThisContext({breakOnSigint: true, displayErrors: false});
      promise = Promise.resolve([value]);
    } else {
      const js = RewriteImportCalls(kTypeScript ? Transpile(code, cellName) : code, cellName);
      const {hoisted, functions, body} = Rewrite(js, cellName);
      if (hoisted.length > 0) vm.runInThisContext(`var ${hoisted.join(', ')};`);
      current.wrapperLine = body.split('\n').length + 1;
      const publish = functions.map((f) => `globalThis[${JSONStringify(f)}] = ${f};`).join(' ');
      const prefix = `(async () => {${publish}`;
      const script = new vm.Script(`${prefix}${body}\n})()`,
          {filename: cellName, columnOffset: -prefix.length});
      promise = script.runInThisContext({breakOnSigint: true, displayErrors: false});
    }
  } catch (err) {
    if (err && err.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') return Finish(id, Interrupted(id));
    return Finish(id, ErrorEvent(id, err));
  }
  Promise.resolve(promise).then((wrapped) => {
    const value = Array.isArray(wrapped) ? wrapped[0] : undefined;
    const result = value === undefined ? null : util.inspect(value, {colors: false, depth: 4});
    Finish(id, {type: 'done', id, status: 'ok', result});
  }, (err) => Finish(id, ErrorEvent(id, err)));
}

// The watchdog: a thread that, when js_kernel.py writes a byte to the
// interrupt fd (a SIGINT got no answer), stops the JavaScript the main thread
// is stuck in (a loop after an await, outside any vm call) through the
// inspector's Runtime.terminateExecution. It does so only if the main thread
// is really stuck: its heartbeat has not moved for 300 ms. The SIGINT handler
// below then runs and ends the execution.
const kInterruptFd = FdArgument('interrupt-fd', -1);
if (kInterruptFd >= 0) {
  try {
    const {Worker} = require('worker_threads');
    require('inspector');
    const heartbeat = new Int32Array(new SharedArrayBuffer(4));
    setInterval(() => Atomics.add(heartbeat, 0, 1), 100).unref();
    const watchdog = new Worker(`
      const {workerData} = require('worker_threads');
      const fs = require('fs');
      const session = new (require('inspector').Session)();
      session.connectToMainThread();
      const nap = new Int32Array(new SharedArrayBuffer(4));
      const byte = Buffer.alloc(1);
      for (;;) {
        let n;
        try {
          n = fs.readSync(workerData.fd, byte, 0, 1, null);
        } catch (e) {
          if (e.code === 'EAGAIN' || e.code === 'EINTR') continue;
          break;
        }
        if (n === 0) break;
        const before = Atomics.load(workerData.heartbeat, 0);
        Atomics.wait(nap, 0, 0, 300);
        if (Atomics.load(workerData.heartbeat, 0) === before) session.post('Runtime.terminateExecution');
      }`, {eval: true, workerData: {fd: kInterruptFd, heartbeat}});
    watchdog.unref();
  } catch (e) {}
}

process.on('SIGINT', () => {
  if (current) Finish(current.id, Interrupted(current.id));
});
// Errors thrown later by timers or rejected promises nobody awaits: shown,
// never fatal.
process.on('uncaughtException', (err) => {
  Send({type: 'stream', name: 'stderr', text: `Uncaught ${util.inspect(err)}\n`});
});
process.on('unhandledRejection', (reason) => {
  Send({type: 'stream', name: 'stderr', text: `Unhandled promise rejection: ${util.inspect(reason)}\n`});
});

// Warm up the parser (and the transpiler) so the first cell is fast, also
// right after a template snapshot.
if (ts) {
  try {
    Rewrite('const a = 1; a', 'warmup.js');
    if (kTypeScript) Transpile('const a: number = 1; a', 'warmup.ts');
  } catch (e) {}
}

const requests = require('net').Socket({fd: kRequestFd, readable: true, writable: false});
let pending = '';
requests.setEncoding('utf8');
requests.on('data', (chunk) => {
  pending += chunk;
  let nl;
  while ((nl = pending.indexOf('\n')) >= 0) {
    const line = pending.slice(0, nl);
    pending = pending.slice(nl + 1);
    if (!line.trim()) continue;
    let request;
    try {
      request = JSONParse(line);
    } catch (e) {
      continue;
    }
    Execute(request.id, String(request.code));
  }
});
requests.on('end', () => process.exit(0));
requests.on('error', () => process.exit(0));
Send({type: 'ready'});
