/** The version from package.json, embedded in the compiled binary at build time. */
import packageJson from "../package.json" with { type: "json" };

export const VERSION: string = packageJson.version;
