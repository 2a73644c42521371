/**
 * A schema check of Kubernetes manifests, for deploy/kubernetes/ where no cluster and no kubeconform
 * are at hand: the fields the API server requires of each kind used there (ConfigMap, Service,
 * Deployment, Kustomization), and the references between objects that kubectl accepts but that
 * break at run time (selectors, targetPorts, probe ports, ConfigMap keys, volume names, $(VAR)s).
 * Pure: objects in, problems out (each names its file and object).
 */

export interface ManifestObject {
  file: string;
  object: Record<string, any>;
}

const API_VERSIONS: Record<string, string> = {
  ConfigMap: "v1",
  Service: "v1",
  Deployment: "apps/v1",
  Kustomization: "kustomize.config.k8s.io/v1beta1",
};

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
// IANA service name: what a container port's and a Service port's name must be.
const PORT_NAME = /^(?=.{1,15}$)(?=.*[a-z])[a-z0-9]([a-z0-9-]*[a-z0-9])?$/;
const ENV_NAME = /^[-._a-zA-Z][-._a-zA-Z0-9]*$/;
const QUANTITY = /^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$/;

const isObject = (value: unknown): value is Record<string, any> => typeof value === "object" && value !== null && !Array.isArray(value);
const isPort = (value: unknown): value is number => Number.isInteger(value) && (value as number) >= 1 && (value as number) <= 65535;

export function describeObject(entry: ManifestObject): string {
  return `${entry.file}: ${entry.object?.kind ?? "?"} ${entry.object?.metadata?.name ?? "(no name)"}`;
}

/** Labels a selector's every key/value is among. */
export function selectorMatches(selector: Record<string, string>, labels: Record<string, string> | undefined): boolean {
  return Object.keys(selector).length > 0 && Object.entries(selector).every(([key, value]) => labels?.[key] === value);
}

export function deploymentsOf(objects: ManifestObject[]): ManifestObject[] {
  return objects.filter((entry) => entry.object.kind === "Deployment");
}

export function containersOf(deployment: Record<string, any>): Array<Record<string, any>> {
  const containers = deployment.spec?.template?.spec?.containers;
  return Array.isArray(containers) ? containers : [];
}

/** The environment a container's $(VAR)s can use: env names, and the keys of envFrom ConfigMaps. */
export function containerEnvironment(container: Record<string, any>, objects: ManifestObject[]): Record<string, string | null> {
  const env: Record<string, string | null> = {};
  for (const source of container.envFrom ?? []) {
    const configMap = objects.find((entry) => entry.object.kind === "ConfigMap" && entry.object.metadata?.name === source.configMapRef?.name);
    for (const [key, value] of Object.entries(configMap?.object.data ?? {})) env[key] = String(value);
  }
  for (const variable of container.env ?? []) {
    if (typeof variable.value === "string") env[variable.name] = variable.value;
    else if (variable.valueFrom?.configMapKeyRef) {
      const ref = variable.valueFrom.configMapKeyRef;
      const configMap = objects.find((entry) => entry.object.kind === "ConfigMap" && entry.object.metadata?.name === ref.name);
      env[variable.name] = configMap?.object.data?.[ref.key] ?? null;
    } else env[variable.name] = null;
  }
  return env;
}

/** A container's args with $(VAR) replaced as the kubelet does (an unknown one stays as written). */
export function expandedArgs(container: Record<string, any>, objects: ManifestObject[]): string[] {
  const env = containerEnvironment(container, objects);
  return (container.args ?? []).map((arg: string) => arg.replace(/\$\(([-._a-zA-Z0-9]+)\)/g, (whole, name: string) => env[name] ?? whole));
}

/** The Service (by name) whose `port` is exposed, and the container port behind it; null when none. */
export function serviceTarget(objects: ManifestObject[], serviceName: string, port: number): { container: Record<string, any>; containerPort: number } | null {
  const service = objects.find((entry) => entry.object.kind === "Service" && entry.object.metadata?.name === serviceName)?.object;
  const servicePort = (service?.spec?.ports ?? []).find((candidate: any) => candidate.port === port);
  if (!servicePort) return null;
  const target = servicePort.targetPort ?? servicePort.port;
  for (const deployment of deploymentsOf(objects)) {
    if (!selectorMatches(service!.spec.selector ?? {}, deployment.object.spec?.template?.metadata?.labels)) continue;
    for (const container of containersOf(deployment.object)) {
      const found = (container.ports ?? []).find((candidate: any) => (typeof target === "string" ? candidate.name === target : candidate.containerPort === target));
      if (found) return { container, containerPort: found.containerPort };
    }
  }
  return null;
}

function checkContainer(container: Record<string, any>, volumes: Set<string>, objects: ManifestObject[], where: string): string[] {
  const problems: string[] = [];
  const at = `${where}, container ${container.name ?? "(no name)"}`;
  if (typeof container.name !== "string" || !DNS_LABEL.test(container.name)) problems.push(`${at}: name must be a DNS label`);
  if (typeof container.image !== "string" || container.image === "") problems.push(`${at}: image is required`);
  for (const field of ["command", "args"]) {
    const list = container[field];
    if (list !== undefined && !(Array.isArray(list) && list.every((item) => typeof item === "string"))) problems.push(`${at}: ${field} must be a list of strings (quote numbers)`);
  }
  const portNames = new Set<string>();
  const portNumbers = new Set<number>();
  for (const port of container.ports ?? []) {
    if (!isPort(port.containerPort)) problems.push(`${at}: containerPort ${JSON.stringify(port.containerPort)} is not a port number`);
    else portNumbers.add(port.containerPort);
    if (port.name !== undefined) {
      if (typeof port.name !== "string" || !PORT_NAME.test(port.name)) problems.push(`${at}: port name ${JSON.stringify(port.name)} is not an IANA service name (a-z0-9-, at most 15)`);
      else if (portNames.has(port.name)) problems.push(`${at}: port name ${port.name} is used twice`);
      else portNames.add(port.name);
    }
  }
  for (const probeName of ["readinessProbe", "livenessProbe", "startupProbe"]) {
    const probe = container[probeName];
    if (probe === undefined) continue;
    const handler = probe.httpGet ?? probe.tcpSocket;
    if (!isObject(handler)) {
      problems.push(`${at}: ${probeName} needs httpGet or tcpSocket (the only handlers this check knows)`);
      continue;
    }
    if (probe.httpGet && (typeof probe.httpGet.path !== "string" || !probe.httpGet.path.startsWith("/"))) problems.push(`${at}: ${probeName}.httpGet.path must start with /`);
    const port = handler.port;
    if (typeof port === "string" ? !portNames.has(port) : !portNumbers.has(port)) problems.push(`${at}: ${probeName} port ${JSON.stringify(port)} is not one of the container's ports`);
  }
  if (!isObject(container.resources?.requests) || container.resources.requests.cpu === undefined || container.resources.requests.memory === undefined) {
    problems.push(`${at}: resources.requests needs cpu and memory`);
  }
  for (const group of ["requests", "limits"]) {
    for (const [name, quantity] of Object.entries(container.resources?.[group] ?? {})) {
      if (!QUANTITY.test(String(quantity))) problems.push(`${at}: resources.${group}.${name} ${JSON.stringify(quantity)} is not a quantity`);
    }
  }
  for (const mount of container.volumeMounts ?? []) {
    if (!volumes.has(mount.name)) problems.push(`${at}: volumeMount ${mount.name} names no volume of the pod`);
    if (typeof mount.mountPath !== "string" || !mount.mountPath.startsWith("/")) problems.push(`${at}: volumeMount ${mount.name} needs an absolute mountPath`);
  }
  const configMaps = new Map(objects.filter((entry) => entry.object.kind === "ConfigMap").map((entry) => [entry.object.metadata?.name, entry.object.data ?? {}]));
  for (const source of container.envFrom ?? []) {
    if (!configMaps.has(source.configMapRef?.name)) problems.push(`${at}: envFrom names ConfigMap ${source.configMapRef?.name}, which these manifests do not define`);
  }
  for (const variable of container.env ?? []) {
    if (typeof variable.name !== "string" || !ENV_NAME.test(variable.name)) problems.push(`${at}: env name ${JSON.stringify(variable.name)} is not valid`);
    const ref = variable.valueFrom?.configMapKeyRef;
    if (ref && !(ref.key in (configMaps.get(ref.name) ?? {}))) problems.push(`${at}: env ${variable.name} reads key ${ref.key} of ConfigMap ${ref.name}, which has none`);
  }
  const env = containerEnvironment(container, objects);
  for (const arg of [...(container.command ?? []), ...(container.args ?? [])]) {
    for (const match of String(arg).matchAll(/\$\(([-._a-zA-Z0-9]+)\)/g)) {
      if (!(match[1]! in env)) problems.push(`${at}: $(${match[1]}) is set by neither env nor envFrom: the container would get it literally`);
    }
  }
  return problems;
}

function checkDeployment(entry: ManifestObject, objects: ManifestObject[]): string[] {
  const where = describeObject(entry);
  const spec = entry.object.spec;
  if (!isObject(spec)) return [`${where}: spec is required`];
  const problems: string[] = [];
  if (spec.replicas !== undefined && !(Number.isInteger(spec.replicas) && spec.replicas >= 0)) problems.push(`${where}: replicas must be a whole number`);
  const selector = spec.selector?.matchLabels;
  if (!isObject(selector) || Object.keys(selector).length === 0) problems.push(`${where}: spec.selector.matchLabels is required`);
  else if (!selectorMatches(selector, spec.template?.metadata?.labels)) problems.push(`${where}: spec.selector does not match the pod template's labels`);
  const containers = containersOf(entry.object);
  if (containers.length === 0) problems.push(`${where}: spec.template.spec.containers must list at least one container`);
  const volumes = new Set<string>((spec.template?.spec?.volumes ?? []).map((volume: any) => volume.name));
  for (const container of containers) problems.push(...checkContainer(container, volumes, objects, where));
  return problems;
}

function checkService(entry: ManifestObject, objects: ManifestObject[]): string[] {
  const where = describeObject(entry);
  const spec = entry.object.spec;
  if (!isObject(spec)) return [`${where}: spec is required`];
  const problems: string[] = [];
  if (!DNS_LABEL.test(entry.object.metadata?.name ?? "")) problems.push(`${where}: a Service's name must be a DNS label`);
  const ports = spec.ports;
  if (!Array.isArray(ports) || ports.length === 0) return [...problems, `${where}: spec.ports must list at least one port`];
  const selected = deploymentsOf(objects).filter((deployment) => selectorMatches(spec.selector ?? {}, deployment.object.spec?.template?.metadata?.labels));
  if (selected.length === 0) problems.push(`${where}: its selector matches no Deployment's pods`);
  for (const port of ports) {
    if (!isPort(port.port)) problems.push(`${where}: port ${JSON.stringify(port.port)} is not a port number`);
    if (ports.length > 1 && (typeof port.name !== "string" || !PORT_NAME.test(port.name))) problems.push(`${where}: with several ports each needs a name`);
    if (selected.length > 0 && serviceTarget(objects, entry.object.metadata.name, port.port) === null) {
      problems.push(`${where}: port ${port.port}'s targetPort ${JSON.stringify(port.targetPort ?? port.port)} is no container port of the pods it selects`);
    }
  }
  return problems;
}

function checkConfigMap(entry: ManifestObject): string[] {
  const data = entry.object.data ?? {};
  if (!isObject(data)) return [`${describeObject(entry)}: data must be a map`];
  return Object.entries(data).filter(([, value]) => typeof value !== "string").map(([key]) => `${describeObject(entry)}: data.${key} must be a string (quote it)`);
}

/** `files`: the manifest files beside a Kustomization (its resources must be exactly those). */
function checkKustomization(entry: ManifestObject, files: string[]): string[] {
  const resources: unknown = entry.object.resources;
  if (!Array.isArray(resources)) return [`${describeObject(entry)}: resources must be a list`];
  const problems = resources.filter((resource) => !files.includes(String(resource))).map((resource) => `${describeObject(entry)}: resource ${resource} is not a file here`);
  for (const file of files) if (!resources.includes(file)) problems.push(`${describeObject(entry)}: ${file} is not in its resources`);
  return problems;
}

/** Every problem found; [] when the manifests pass. */
export function checkManifests(objects: ManifestObject[]): string[] {
  const problems: string[] = [];
  const manifestFiles = [...new Set(objects.filter((entry) => entry.object.kind !== "Kustomization").map((entry) => entry.file))];
  const names = new Set<string>();
  for (const entry of objects) {
    const { object } = entry;
    const where = describeObject(entry);
    if (!isObject(object)) {
      problems.push(`${entry.file}: a document that is not an object`);
      continue;
    }
    const expected = API_VERSIONS[object.kind];
    if (expected === undefined) {
      problems.push(`${where}: kind ${JSON.stringify(object.kind)} is not one this check knows (${Object.keys(API_VERSIONS).join(", ")})`);
      continue;
    }
    if (object.apiVersion !== expected) problems.push(`${where}: apiVersion must be ${expected}, not ${JSON.stringify(object.apiVersion)}`);
    if (object.kind === "Kustomization") {
      problems.push(...checkKustomization(entry, manifestFiles));
      continue;
    }
    const name = object.metadata?.name;
    if (typeof name !== "string" || !DNS_SUBDOMAIN.test(name) || name.length > 253) problems.push(`${where}: metadata.name must be a DNS subdomain`);
    const key = `${object.kind}/${name}`;
    if (names.has(key)) problems.push(`${where}: defined twice`);
    names.add(key);
    if (object.kind === "Deployment") problems.push(...checkDeployment(entry, objects));
    if (object.kind === "Service") problems.push(...checkService(entry, objects));
    if (object.kind === "ConfigMap") problems.push(...checkConfigMap(entry));
  }
  return problems;
}
