/**
 * Why a Redis connection failed, in words. Bun's Redis client reports every failed connection
 * alike ("Connection closed"): a wrong password, an untrusted certificate, nothing listening
 * and an unknown host. After such a failure this probe connects once more on a plain socket
 * (TLS for rediss://), authenticates as the client would, and names the first step that fails.
 */
import { lookup } from "node:dns/promises";
import { connect as connectTcp, type Socket } from "node:net";
import { connect as connectTls } from "node:tls";
import type { RedisUrl } from "./redisUrl.ts";

export interface RedisTlsSettings {
  /** PEM text of the CA(s) that signed the server's certificate (--redis-ca). */
  ca?: string;
  /** The file it came from, for messages. */
  caFile?: string;
}

/** The options Bun's RedisClient takes for a URL: TLS with our CA for rediss://. */
export function redisTlsOption(url: RedisUrl, tls: RedisTlsSettings | undefined): { tls?: boolean | { ca: string } } {
  if (!url.tls) return {};
  return tls?.ca === undefined ? { tls: true } : { tls: { ca: tls.ca } };
}

/** Whether an error from Bun's Redis client is a failed or lost connection (not an error reply). */
export function isConnectionFailure(error: unknown): boolean {
  const code = (error as { code?: unknown })?.code;
  if (typeof code === "string" && /^ERR_REDIS_(CONNECTION|SOCKET|TLS)/.test(code)) return true;
  return /connection (closed|has failed)|socket closed|ECONNREFUSED/i.test(String((error as Error)?.message ?? error));
}

/** A sentence saying why connecting to `url` fails, or null when the probe connects and authenticates. */
export async function diagnoseRedisConnection(url: RedisUrl, tls: RedisTlsSettings | undefined, timeoutMs: number): Promise<string | null> {
  const where = `${url.host}:${url.port}`;
  try {
    await withTimeout(lookup(url.host), timeoutMs, "lookup");
  } catch (error) {
    return /lookup/.test((error as Error).message) && (error as Error).message.startsWith("timeout") ? `the host name ${url.host} did not resolve within ${timeoutMs} ms` : `the host ${url.host} is unknown (${(error as { code?: string }).code ?? (error as Error).message})`;
  }
  let socket: Socket;
  try {
    socket = await open(url, tls, timeoutMs);
  } catch (error) {
    return describeSocketError(error, where, url, tls, timeoutMs);
  }
  try {
    const credentials = new URL(url.url);
    const user = decodeURIComponent(credentials.username);
    const password = decodeURIComponent(credentials.password);
    const command = password !== "" ? (user !== "" ? ["AUTH", user, password] : ["AUTH", password]) : ["PING"];
    const reply = await withTimeout(roundTrip(socket, command), timeoutMs, "reply");
    if (/^-WRONGPASS|^-ERR invalid password|^-ERR invalid username-password/i.test(reply)) return `Redis at ${where} refused the password${user === "" ? "" : ` for user ${user}`} (wrong password)`;
    if (/^-NOAUTH/i.test(reply)) return `Redis at ${where} needs a password; give it in the URL (redis://:PASSWORD@${where})`;
    if (/^-ERR AUTH .*no password is set|^-ERR Client sent AUTH, but no password is set/i.test(reply)) return `Redis at ${where} has no password set, but the URL gives one`;
    if (reply.startsWith("-")) return `Redis at ${where} answered ${JSON.stringify(reply.trim().slice(0, 200))}`;
    return null;
  } catch (error) {
    const message = (error as Error).message;
    return message.startsWith("timeout") ? `${where} accepted the connection but did not answer as Redis within ${timeoutMs} ms` : `${where} closed the connection (${message}); is it Redis${url.tls ? " with TLS" : ""}?`;
  } finally {
    socket.destroy();
  }
}

function open(url: RedisUrl, tls: RedisTlsSettings | undefined, timeoutMs: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = url.tls
      ? connectTls({ host: url.host, port: url.port, servername: /^[\d.]+$|:/.test(url.host) ? undefined : url.host, ...(tls?.ca === undefined ? {} : { ca: tls.ca }) }, () => resolve(socket))
      : connectTcp({ host: url.host, port: url.port }, () => resolve(socket));
    socket.once("error", reject);
    let tcpConnected = false;
    socket.once("connect", () => (tcpConnected = true));
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(tcpConnected ? "timeout: tls" : "timeout: connect"));
    }, timeoutMs);
    socket.once(url.tls ? "secureConnect" : "connect", () => clearTimeout(timer));
    socket.once("close", () => clearTimeout(timer));
  });
}

function roundTrip(socket: Socket, command: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    let reply = "";
    socket.on("data", (chunk) => {
      reply += chunk.toString("utf8");
      if (reply.includes("\r\n")) resolve(reply);
    });
    socket.once("error", reject);
    socket.once("close", () => reject(new Error("closed before answering")));
    socket.write(`*${command.length}\r\n${command.map((part) => `$${Buffer.byteLength(part)}\r\n${part}\r\n`).join("")}`);
  });
}

function describeSocketError(error: unknown, where: string, url: RedisUrl, tls: RedisTlsSettings | undefined, timeoutMs: number): string {
  const code = (error as { code?: string }).code ?? "";
  const message = (error as Error).message ?? String(error);
  if (message === "timeout: tls") return `the TLS handshake with ${where} got no answer within ${timeoutMs} ms; does it serve TLS?`;
  if (message.startsWith("timeout")) return `no answer from ${where} within ${timeoutMs} ms (unreachable host, or a firewall)`;
  if (code === "ECONNREFUSED") return `nothing is listening at ${where} (connection refused)`;
  if (code === "EHOSTUNREACH" || code === "ENETUNREACH") return `${where} is unreachable (${code})`;
  if (url.tls && /CERT|SELF_SIGNED|UNABLE_TO_(GET|VERIFY)|ISSUER|HOSTNAME|ERR_TLS|certificate/i.test(`${code} ${message}`)) {
    const ca = tls?.caFile === undefined ? "the system's CAs (give the server's CA with --redis-ca FILE)" : `the CA in ${tls.caFile}`;
    return `the TLS certificate of ${where} is not trusted by ${ca}: ${code || message}`;
  }
  if (url.tls && /SSL|TLS|wrong version|packet length/i.test(`${code} ${message}`)) return `the TLS handshake with ${where} failed (${code || message}); does it serve TLS?`;
  return `connecting to ${where} failed (${code || message})`;
}

async function withTimeout<T>(operation: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([operation, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timeout: ${what}`)), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}
