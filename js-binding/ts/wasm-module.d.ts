/** A `.wasm` imported as a module, as workerd's bundlers (wrangler) provide it: compiled, not instantiated. */
declare module '*.wasm' {
  const module: WebAssembly.Module;
  export default module;
}
