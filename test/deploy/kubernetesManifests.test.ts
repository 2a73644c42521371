/** The schema check of kubernetesManifests.ts finds each kind of break in an otherwise good set of manifests. */
import { describe, expect, test } from "bun:test";
import { checkManifests, type ManifestObject } from "./kubernetesManifests.ts";

function goodManifests(): ManifestObject[] {
  const labels = { app: "web" };
  return [
    { file: "kustomization.yaml", object: { apiVersion: "kustomize.config.k8s.io/v1beta1", kind: "Kustomization", resources: ["web.yaml"] } },
    { file: "web.yaml", object: { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "web" }, data: { UPSTREAM: "http://up:80" } } },
    {
      file: "web.yaml",
      object: {
        apiVersion: "apps/v1",
        kind: "Deployment",
        metadata: { name: "web" },
        spec: {
          replicas: 2,
          selector: { matchLabels: labels },
          template: {
            metadata: { labels: { ...labels, tier: "front" } },
            spec: {
              containers: [
                {
                  name: "web",
                  image: "web:1",
                  args: ["--port", "8080", "--upstream", "$(UPSTREAM)"],
                  envFrom: [{ configMapRef: { name: "web" } }],
                  env: [{ name: "MODE", valueFrom: { configMapKeyRef: { name: "web", key: "UPSTREAM" } } }],
                  ports: [{ name: "http", containerPort: 8080 }],
                  readinessProbe: { httpGet: { path: "/health", port: "http" } },
                  resources: { requests: { cpu: "250m", memory: "256Mi" }, limits: { memory: "1Gi" } },
                  volumeMounts: [{ name: "cache", mountPath: "/cache" }],
                },
              ],
              volumes: [{ name: "cache", emptyDir: {} }],
            },
          },
        },
      },
    },
    { file: "web.yaml", object: { apiVersion: "v1", kind: "Service", metadata: { name: "web" }, spec: { selector: labels, ports: [{ port: 80, targetPort: "http" }] } } },
  ];
}

const deployment = (manifests: ManifestObject[]) => manifests[2]!.object;
const container = (manifests: ManifestObject[]) => deployment(manifests).spec.template.spec.containers[0];
const service = (manifests: ManifestObject[]) => manifests[3]!.object;

const BREAKS: Array<[what: string, brokenBy: (manifests: ManifestObject[]) => void, problem: RegExp]> = [
  ["a wrong apiVersion", (m) => (deployment(m).apiVersion = "extensions/v1beta1"), /apiVersion must be apps\/v1/],
  ["an unknown kind", (m) => (service(m).kind = "Servise"), /kind "Servise" is not one/],
  ["a name that is no DNS name", (m) => (deployment(m).metadata.name = "Web_1"), /DNS subdomain/],
  ["a selector the pods do not carry", (m) => (deployment(m).spec.selector.matchLabels = { app: "api" }), /selector does not match/],
  ["a Service selecting no pods", (m) => (service(m).spec.selector = { app: "api" }), /matches no Deployment/],
  ["a targetPort no container has", (m) => (service(m).spec.ports[0].targetPort = "https"), /targetPort "https" is no container port/],
  ["a numeric targetPort no container has", (m) => (service(m).spec.ports[0].targetPort = 9090), /targetPort 9090/],
  ["a probe on a port not declared", (m) => (container(m).readinessProbe.httpGet.port = 9090), /readinessProbe port 9090/],
  ["a probe path without /", (m) => (container(m).readinessProbe.httpGet.path = "health"), /path must start with \//],
  ["an unquoted number in args", (m) => (container(m).args[1] = 8080), /args must be a list of strings/],
  ["no resource requests", (m) => delete container(m).resources.requests, /resources.requests needs cpu and memory/],
  ["a bad quantity", (m) => (container(m).resources.limits.memory = "1 GB"), /is not a quantity/],
  ["a missing ConfigMap", (m) => (container(m).envFrom[0].configMapRef.name = "absent"), /ConfigMap absent, which these manifests do not define/],
  ["a missing ConfigMap key", (m) => (container(m).env[0].valueFrom.configMapKeyRef.key = "ABSENT"), /reads key ABSENT/],
  ["a $(VAR) nothing sets", (m) => (container(m).args[3] = "$(UPSTREAMS)"), /\$\(UPSTREAMS\) is set by neither/],
  ["a mount of no volume", (m) => (container(m).volumeMounts[0].name = "data"), /volumeMount data names no volume/],
  ["a port name too long", (m) => (container(m).ports[0].name = "http-for-the-api"), /not an IANA service name/],
  ["a ConfigMap value that is not a string", (m) => (m[1]!.object.data.PORT = 8080), /data.PORT must be a string/],
  ["a Kustomization resource that is missing", (m) => m[0]!.object.resources.push("absent.yaml"), /resource absent.yaml is not a file here/],
  ["a manifest the Kustomization leaves out", (m) => (m[0]!.object.resources = []), /web.yaml is not in its resources/],
  ["an object defined twice", (m) => m.push({ file: "web.yaml", object: structuredClone(service(m)) }), /defined twice/],
];

describe("checkManifests", () => {
  test("passes good manifests", () => {
    expect(checkManifests(goodManifests())).toEqual([]);
  });

  for (const [what, brokenBy, problem] of BREAKS) {
    test(`finds ${what}`, () => {
      const manifests = goodManifests();
      brokenBy(manifests);
      const problems = checkManifests(manifests);
      expect(problems.some((found) => problem.test(found))).toBe(true);
    });
  }
});
