// Reads dead-letter CloudEvents with the CloudEvents JS SDK and writes them
// back, for internal/contracttest (cloudevents_test.go).
//
// Each line of standard input is {"name", "mode", "headers", "body"}: mode
// "structured" (an event in the JSON format), "http" (HTTP binary mode) or
// "kafka" (Kafka binary mode); body in base64. For each, the event is read
// the way the SDK documents (HTTP.toEvent, Kafka.toEvent) and written back
// in every way it offers (HTTP.structured, HTTP.binary, Kafka.structured,
// Kafka.binary); each result is a line {"name", "via", "headers", "body",
// "error"}, the body in base64 as it would go on the wire.
"use strict";

const readline = require("readline");
const { HTTP, Kafka } = require("cloudevents");

// wire returns the bytes a body would be sent as: strings in UTF-8, typed
// arrays as their memory (as Node's http and kafkajs write them), other
// objects as JSON (a producer must serialise them itself).
function wire(body) {
  if (body === undefined || body === null) return "";
  if (typeof body === "string") return Buffer.from(body, "utf8").toString("base64");
  if (ArrayBuffer.isView(body)) return Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString("base64");
  return Buffer.from(JSON.stringify(body), "utf8").toString("base64");
}

// sendable keeps what an HTTP or Kafka client sends: no undefined values,
// every value a string.
function sendable(headers) {
  const out = {};
  for (const [k, v] of Object.entries(headers)) {
    if (v !== undefined && v !== null) out[k] = Buffer.isBuffer(v) ? v.toString("utf8") : String(v);
  }
  return out;
}

function emit(name, via, f) {
  let line;
  try {
    const m = f();
    const kafka = via.slice(via.lastIndexOf("/") + 1).startsWith("kafka");
    line = { name, via, headers: sendable(m.headers), body: wire(kafka ? m.value : m.body), error: "" };
  } catch (e) {
    line = { name, via, headers: {}, body: "", error: String(e && e.message || e) };
  }
  process.stdout.write(JSON.stringify(line) + "\n");
}

function writeAll(name, prefix, ev) {
  emit(name, prefix + "/http-structured", () => HTTP.structured(ev));
  emit(name, prefix + "/http-binary", () => HTTP.binary(ev));
  emit(name, prefix + "/kafka-structured", () => Kafka.structured(ev));
  emit(name, prefix + "/kafka-binary", () => Kafka.binary(ev));
}

const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
rl.on("line", (text) => {
  if (!text) return;
  const msg = JSON.parse(text);
  const body = Buffer.from(msg.body, "base64");
  const read = (via, f) => {
    let ev;
    try {
      ev = f();
    } catch (e) {
      emit(msg.name, via, () => { throw e; });
      return;
    }
    writeAll(msg.name, via, ev);
  };
  switch (msg.mode) {
    case "structured":
      read("http-structured-text", () => HTTP.toEvent({ headers: msg.headers, body: body.toString("utf8") }));
      read("kafka-structured", () => Kafka.toEvent({ headers: msg.headers, value: body, key: "k" }));
      break;
    case "http":
      // As a framework hands it over: text (express.text) or bytes (express.raw).
      read("http-binary-text", () => HTTP.toEvent({ headers: msg.headers, body: body.toString("utf8") }));
      read("http-binary-bytes", () => HTTP.toEvent({ headers: msg.headers, body }));
      break;
    case "kafka":
      read("kafka-binary", () => Kafka.toEvent({ headers: msg.headers, value: body, key: "k" }));
      break;
    default:
      emit(msg.name, "?", () => { throw new Error("unknown mode " + msg.mode); });
  }
});
