package format

// ToolVersion names the sinf toolchain that wrote a file: recorded in a
// .sinf file's provenance (metadata field tool_version) and in score files,
// and printed by `sinf --version` and `sinf-run --version`.
const ToolVersion = "sinf 0.1.0"
