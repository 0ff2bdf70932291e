//! The wasmtime side: module loading, the per-VM store state and one VM instance with
//! typed handles to the proxy-wasm exports.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};

use anyhow::{anyhow, bail, Context as _};
use wasmtime::{
    Engine, InstancePre, Linker, Memory, Module, Store, StoreLimits, StoreLimitsBuilder, TypedFunc,
};

use crate::clock::Rng;
use crate::env::{Env, LifecycleCall};
use crate::headers::HeaderMap;
use crate::types::{LocalReply, PluginConfig, UpstreamReply};

/// Converts a wasmtime error into an anyhow error (keeping the full message).
pub(crate) fn wt(e: wasmtime::Error) -> anyhow::Error {
    anyhow!("{e:?}")
}

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut cfg = wasmtime::Config::new();
        cfg.cranelift_opt_level(wasmtime::OptLevel::Speed);
        if std::env::var_os("FUSEWIRE_HOST_PERFMAP").is_some() {
            // /tmp/perf-<pid>.map names the JIT code for perf and callgrind.
            cfg.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        Engine::new(&cfg).unwrap_or_else(|e| panic!("wasmtime engine: {e:?}"))
    })
}

fn linker() -> &'static Linker<VmState> {
    static LINKER: OnceLock<Linker<VmState>> = OnceLock::new();
    LINKER.get_or_init(|| {
        let mut l = Linker::new(engine());
        crate::hostcalls::add_to_linker(&mut l).unwrap_or_else(|e| panic!("linker: {e:?}"));
        crate::wasi::add_to_linker(&mut l).unwrap_or_else(|e| panic!("linker: {e:?}"));
        l
    })
}

/// A compiled proxy-wasm module, ready to be instantiated as many VMs.
#[derive(Clone)]
pub struct WasmModule {
    pre: InstancePre<VmState>,
    name: String,
    /// (hash, length) of the module bytes: the `code` part of Envoy's VM key.
    code: (u64, usize),
}

impl WasmModule {
    /// Compiles a `.wasm` file (wasm32-wasip1 or wasm32-unknown-unknown).
    pub fn from_file(path: impl AsRef<std::path::Path>) -> anyhow::Result<Self> {
        let path = path.as_ref();
        let bytes = std::fs::read(path)
            .with_context(|| format!("reading wasm module {}", path.display()))?;
        Self::from_bytes(&bytes, &path.display().to_string())
    }

    /// Compiles module bytes; `name` is used in errors and reports. Compiled modules
    /// are memoized per process by content, so loading the same bytes again is free.
    pub fn from_bytes(bytes: &[u8], name: &str) -> anyhow::Result<Self> {
        use std::hash::{Hash, Hasher};
        static CACHE: std::sync::Mutex<Vec<(u64, usize, WasmModule)>> =
            std::sync::Mutex::new(Vec::new());
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        bytes.hash(&mut hasher);
        let key = (hasher.finish(), bytes.len());
        if let Some((_, _, m)) = CACHE
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(h, l, _)| (*h, *l) == key)
        {
            return Ok(WasmModule {
                pre: m.pre.clone(),
                name: name.to_string(),
                code: key,
            });
        }
        let mut m = Self::compile(bytes, name)?;
        m.code = key;
        let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= 32 {
            cache.remove(0);
        }
        cache.push((key.0, key.1, m.clone()));
        Ok(m)
    }

    fn compile(bytes: &[u8], name: &str) -> anyhow::Result<Self> {
        let module = Module::new(engine(), bytes)
            .map_err(wt)
            .with_context(|| format!("compiling {name}"))?;
        if module.get_export("proxy_abi_version_0_2_1").is_none() {
            bail!("{name}: not a proxy-wasm ABI 0.2.1 module (no export proxy_abi_version_0_2_1)");
        }
        for imp in module.imports() {
            let known = match imp.module() {
                "env" => crate::hostcalls::NAMES.contains(&imp.name()),
                "wasi_snapshot_preview1" => crate::wasi::NAMES.contains(&imp.name()),
                _ => false,
            };
            if !known {
                bail!(
                    "{name}: Failed to load Wasm module due to a missing import: {}.{}",
                    imp.module(),
                    imp.name()
                );
            }
        }
        let pre = linker()
            .instantiate_pre(&module)
            .map_err(wt)
            .with_context(|| format!("linking {name}"))?;
        Ok(WasmModule {
            pre,
            name: name.to_string(),
            code: (0, 0),
        })
    }

    /// The name given at load time.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether `other` was compiled from the same bytes (Envoy's VM key hashes the code
    /// itself, not the file name).
    pub fn same_code(&self, other: &WasmModule) -> bool {
        self.code == other.code
    }
}

/// Which callback is running (decides which maps/buffers exist).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    None,
    /// Start functions (`_initialize`, `main`): only the VM context (id 0) exists.
    Init,
    VmStart,
    Configure,
    Root,
    RequestHeaders,
    RequestBody,
    RequestTrailers,
    ResponseHeaders,
    ResponseBody,
    ResponseTrailers,
    HttpCallResponse,
    GrpcCallback,
    Log,
    Done,
    Delete,
}

/// Per-stream data the host functions read and write.
///
/// The `*_live` flags model Envoy's map/buffer pointers in the wasm `Context`
/// (`request_headers_`, `request_body_buffer_`, ...): set when the frame reaches the
/// filter, cleared when its callback returns Continue (or `continue_stream` is called for
/// the request side). Strict lifetimes serve a map only while it is live.
#[derive(Default)]
pub(crate) struct StreamData {
    /// Root context that created this stream.
    pub root: u32,
    /// `xds.route_name`: None when no route matched (NOT_FOUND, as Envoy's).
    pub route_name: Option<String>,
    /// `xds.cluster_name`: None without a route or when the route's cluster does not
    /// exist (Envoy keeps no cluster info for it: NOT_FOUND).
    pub cluster_name: Option<String>,
    pub upstream_address: Option<String>,
    pub upstream_port: u16,
    pub start_wall_ns: u64,
    pub req_headers: HeaderMap,
    pub req_headers_live: bool,
    pub req_body: Vec<u8>,
    pub req_body_live: bool,
    pub req_trailers: Option<HeaderMap>,
    pub req_trailers_live: bool,
    pub resp_headers: Option<HeaderMap>,
    pub resp_headers_live: bool,
    pub resp_body: Vec<u8>,
    pub resp_body_live: bool,
    pub resp_trailers: Option<HeaderMap>,
    pub resp_trailers_live: bool,
    /// `response.code` once Envoy has set it (upstream: at response start; local
    /// reply: once its headers left the filter).
    pub response_code: Option<u16>,
    /// `response.code_details` once set (before the response filters run).
    pub code_details: Option<String>,
    /// `response.flags` as set so far.
    pub flags: u64,
    /// Set once the stream is complete (on_log onwards).
    pub final_info: Option<FinalInfo>,
    pub local_reply: Option<LocalReply>,
    pub continue_request: bool,
    pub continue_response: bool,
    pub close: bool,
    pub props: HashMap<Vec<u8>, Vec<u8>>,
}

impl StreamData {
    /// A host call left an effect on this stream that the worker has not applied yet.
    pub(crate) fn has_effect(&self) -> bool {
        self.close || self.local_reply.is_some() || self.continue_request || self.continue_response
    }
}

/// Stream info complete only at on_log.
#[derive(Clone, Default)]
pub(crate) struct FinalInfo {
    pub duration_ns: u64,
    pub backend_latency_ns: Option<u64>,
}

/// An in-flight `proxy_http_call`, owned by a root context.
pub(crate) struct PendingCall {
    pub root: u32,
    pub reply: UpstreamReply,
}

/// An in-flight `proxy_grpc_call` (odd token) or `proxy_grpc_stream` (even token).
pub(crate) struct PendingGrpc {
    pub root: u32,
    pub reply: crate::grpc::GrpcReply,
    /// The call's timeout fired before the answer.
    pub timed_out: bool,
}

/// What a root-context callback is handed (call response, gRPC data), readable only
/// during that callback.
#[derive(Default)]
pub(crate) struct CallbackData {
    /// `proxy_http_call` response: headers, body, trailers.
    pub http: Option<(HeaderMap, Vec<u8>, HeaderMap)>,
    /// gRPC receive buffer (buffer type 5).
    pub grpc_message: Option<Vec<u8>>,
    /// gRPC initial (map 4) or trailing (map 5) metadata.
    pub grpc_initial: Option<HeaderMap>,
    pub grpc_trailing: Option<HeaderMap>,
}

/// The store data of one VM.
pub struct VmState {
    pub(crate) env: Arc<Env>,
    /// Worker index (main thread = number of workers); usize::MAX for base/canary.
    pub(crate) worker: usize,
    pub(crate) vm_name: String,
    pub(crate) memory: Option<Memory>,
    pub(crate) alloc: Option<TypedFunc<i32, i32>>,
    pub(crate) current: u32,
    pub(crate) phase: Phase,
    pub(crate) plugin_config: Option<Vec<u8>>,
    /// Live root context ids (one per plugin config loaded into this VM; a reload with
    /// unchanged code adds one, the old one is retired when its plugin handle goes).
    pub(crate) roots: Vec<u32>,
    /// The plugin config each root context was created for (`plugin_name`,
    /// `plugin_root_id` of that root and of its streams).
    pub(crate) root_plugins: HashMap<u32, PluginConfig>,
    /// Root contexts whose `on_done` returned false: deleted once they call `proxy_done`.
    pub(crate) pending_done: Vec<u32>,
    /// Pending-done roots that called `proxy_done` (on_delete runs after the call).
    pub(crate) done_ready: Vec<u32>,
    pub(crate) streams: HashMap<u32, StreamData>,
    pub(crate) calls: HashMap<u32, PendingCall>,
    pub(crate) next_token: u32,
    pub(crate) grpc: HashMap<u32, PendingGrpc>,
    pub(crate) next_grpc: u32,
    pub(crate) callback: CallbackData,
    /// `proxy_get_status` (code, message), set before `on_grpc_close`.
    pub(crate) status: (u32, String),
    /// Tick timers by root context id (Envoy `Wasm::setTimerPeriod(root_context_id)`):
    /// (period ms, generation). A new period replaces the root's timer.
    pub(crate) ticks: HashMap<u32, (u32, u64)>,
    /// Shared queue id → root context that registered it in this VM.
    pub(crate) queue_roots: HashMap<u32, u32>,
    pub(crate) metric_ids: Vec<usize>,
    pub(crate) rng: Rng,
    /// The running callback switched the effective context (it may have acted on
    /// other streams).
    pub(crate) switched_context: bool,
    /// The host calls allowed right now, when restricted (cpp-host
    /// `setRestrictedCallback`): while the start functions run, and inside the
    /// module's allocator. Any other traps with `restricted_callback`.
    pub(crate) restricted: Option<&'static [&'static str]>,
    /// The running body callback was given the stream's end (Envoy's `end_of_stream_`).
    pub(crate) end_of_stream: bool,
    /// A `proxy_send_local_response` succeeded during the running callback, for any
    /// stream (cpp-host `Wasm::stopNextIteration(true)`, a flag of the whole VM): the
    /// calling stream's returned action is read as a stop.
    pub(crate) stop_next: bool,
    /// Stream contexts on which a host call may have left an effect (`close`,
    /// `local_reply`, `continue_*`) for the worker to apply: every stream with such a
    /// flag set is in here (stale entries are pruned by the worker), so applying them
    /// costs per flagged stream, not per live stream.
    pub(crate) effects: BTreeSet<u32>,
    /// The VM's memory cap (`Env::max_vm_memory_bytes`).
    limits: StoreLimits,
}

impl VmState {
    /// Root context of the context `ctx` (itself for a root; 0 for the VM context).
    pub(crate) fn root_of(&self, ctx: u32) -> u32 {
        match self.streams.get(&ctx) {
            Some(s) => s.root,
            None => ctx,
        }
    }
    /// Whether `ctx` is a live context of this VM.
    pub(crate) fn has_context(&self, ctx: u32) -> bool {
        self.roots.contains(&ctx)
            || self.pending_done.contains(&ctx)
            || self.streams.contains_key(&ctx)
    }
    /// The plugin config of the current context's root (the harness's plugin when the
    /// root is unknown, e.g. the VM context).
    pub(crate) fn plugin(&self) -> &PluginConfig {
        self.root_plugins
            .get(&self.root_of(self.current))
            .unwrap_or(&self.env.plugin)
    }
}

/// A fresh tick-timer generation, unique in the process (a stale tick event of a
/// replaced VM or timer never matches).
pub(crate) fn next_tick_gen() -> u64 {
    static GEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    GEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Why a root context did not start.
#[derive(Debug)]
pub(crate) enum StartError {
    /// The guest trapped (the VM is failed).
    Trap(String),
    /// `on_vm_start` or `on_configure` returned false.
    Rejected(&'static str),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Trap(m) => f.write_str(m),
            StartError::Rejected(m) => f.write_str(m),
        }
    }
}

type I32x5 = (i32, i32, i32, i32, i32);

/// Typed handles to the exports the host calls.
#[derive(Clone)]
struct Exports {
    on_context_create: Option<TypedFunc<(i32, i32), ()>>,
    on_vm_start: Option<TypedFunc<(i32, i32), i32>>,
    on_configure: Option<TypedFunc<(i32, i32), i32>>,
    on_tick: Option<TypedFunc<i32, ()>>,
    on_queue_ready: Option<TypedFunc<(i32, i32), ()>>,
    on_done: Option<TypedFunc<i32, i32>>,
    on_log: Option<TypedFunc<i32, ()>>,
    on_delete: Option<TypedFunc<i32, ()>>,
    on_request_headers: Option<TypedFunc<(i32, i32, i32), i32>>,
    on_request_body: Option<TypedFunc<(i32, i32, i32), i32>>,
    on_response_headers: Option<TypedFunc<(i32, i32, i32), i32>>,
    on_response_body: Option<TypedFunc<(i32, i32, i32), i32>>,
    on_http_call_response: Option<TypedFunc<I32x5, ()>>,
    on_request_trailers: Option<TypedFunc<(i32, i32), i32>>,
    on_response_trailers: Option<TypedFunc<(i32, i32), i32>>,
    on_grpc_receive: Option<TypedFunc<(i32, i32, i32), ()>>,
    on_grpc_close: Option<TypedFunc<(i32, i32, i32), ()>>,
    on_grpc_receive_initial_metadata: Option<TypedFunc<(i32, i32, i32), ()>>,
    on_grpc_receive_trailing_metadata: Option<TypedFunc<(i32, i32, i32), ()>>,
}

/// One instantiated VM (a "clone" in Envoy terms).
pub(crate) struct Vm {
    pub store: Store<VmState>,
    ex: Exports,
    next_ctx: u32,
}

/// Result of one guest call: the i32 result (0 for void), or the trap message.
pub(crate) type CallResult = Result<i32, String>;

impl Vm {
    /// Instantiates and runs the start functions (`_initialize` then `main`/
    /// `__main_void`, else `_start`).
    pub fn new(
        module: &WasmModule,
        env: Arc<Env>,
        worker: usize,
        vm_name: &str,
    ) -> anyhow::Result<Vm> {
        let seed = env.seed ^ (worker as u64).wrapping_mul(0x9E37_79B9);
        let max_memory = env.max_vm_memory_bytes;
        let state = VmState {
            env,
            worker,
            vm_name: vm_name.to_string(),
            memory: None,
            alloc: None,
            current: 0,
            phase: Phase::Init,
            plugin_config: None,
            roots: Vec::new(),
            root_plugins: HashMap::new(),
            pending_done: Vec::new(),
            done_ready: Vec::new(),
            streams: HashMap::new(),
            calls: HashMap::new(),
            next_token: 1,
            grpc: HashMap::new(),
            next_grpc: 1,
            callback: CallbackData::default(),
            status: (0, String::new()),
            ticks: HashMap::new(),
            queue_roots: HashMap::new(),
            metric_ids: Vec::new(),
            rng: Rng::new(seed),
            switched_context: false,
            restricted: None,
            end_of_stream: false,
            stop_next: false,
            effects: BTreeSet::new(),
            limits: StoreLimitsBuilder::new()
                .memory_size(usize::try_from(max_memory).unwrap_or(usize::MAX))
                .build(),
        };
        let mut store = Store::new(engine(), state);
        store.limiter(|s| &mut s.limits);
        let inst = module
            .pre
            .instantiate(&mut store)
            .map_err(wt)
            .with_context(|| format!("instantiating {}", module.name))?;
        let memory = inst.get_memory(&mut store, "memory");
        // cpp-host `WasmBase::getFunctions` fails the VM without one.
        let Ok(alloc) = inst
            .get_typed_func::<i32, i32>(&mut store, "malloc")
            .or_else(|_| inst.get_typed_func::<i32, i32>(&mut store, "proxy_on_memory_allocate"))
        else {
            bail!("{}: Wasm module is missing malloc function.", module.name);
        };
        let alloc = Some(alloc);
        store.data_mut().memory = memory;
        store.data_mut().alloc = alloc;
        macro_rules! f {
            ($name:literal) => {
                inst.get_typed_func(&mut store, $name).ok()
            };
        }
        let ex = Exports {
            on_context_create: f!("proxy_on_context_create"),
            on_vm_start: f!("proxy_on_vm_start"),
            on_configure: f!("proxy_on_configure"),
            on_tick: f!("proxy_on_tick"),
            on_queue_ready: f!("proxy_on_queue_ready"),
            on_done: f!("proxy_on_done"),
            on_log: f!("proxy_on_log"),
            on_delete: f!("proxy_on_delete"),
            on_request_headers: f!("proxy_on_request_headers"),
            on_request_body: f!("proxy_on_request_body"),
            on_response_headers: f!("proxy_on_response_headers"),
            on_response_body: f!("proxy_on_response_body"),
            on_http_call_response: f!("proxy_on_http_call_response"),
            on_request_trailers: f!("proxy_on_request_trailers"),
            on_response_trailers: f!("proxy_on_response_trailers"),
            on_grpc_receive: f!("proxy_on_grpc_receive"),
            on_grpc_close: f!("proxy_on_grpc_close"),
            on_grpc_receive_initial_metadata: f!("proxy_on_grpc_receive_initial_metadata"),
            on_grpc_receive_trailing_metadata: f!("proxy_on_grpc_receive_trailing_metadata"),
        };
        let init: Option<TypedFunc<(), ()>> = inst.get_typed_func(&mut store, "_initialize").ok();
        store.data_mut().restricted = Some(crate::hostcalls::START_ALLOWED);
        let start = |store: &mut Store<VmState>, r: wasmtime::Result<()>| {
            r.map_err(|e| anyhow!("{}: start function trapped: {e:?}", store.data().vm_name))
        };
        if let Some(init) = init {
            let r = init.call(&mut store, ());
            start(&mut store, r)?;
            if let Ok(m) = inst.get_typed_func::<(), i32>(&mut store, "__main_void") {
                let r = m.call(&mut store, ()).map(|_| ());
                start(&mut store, r)?;
            } else if let Ok(m) = inst.get_typed_func::<(i32, i32), i32>(&mut store, "main") {
                let r = m.call(&mut store, (0, 0)).map(|_| ());
                start(&mut store, r)?;
            }
        } else if let Ok(s) = inst.get_typed_func::<(), ()>(&mut store, "_start") {
            let r = s.call(&mut store, ());
            start(&mut store, r)?;
        }
        store.data_mut().restricted = None;
        store.data_mut().phase = Phase::None;
        Ok(Vm {
            store,
            ex,
            next_ctx: 1,
        })
    }

    /// A fresh stream context id (root is 1).
    pub fn next_context_id(&mut self) -> u32 {
        let id = self.next_ctx;
        self.next_ctx += 1;
        id
    }

    fn enter(&mut self, ctx: u32, phase: Phase) {
        let d = self.store.data_mut();
        d.current = ctx;
        d.phase = phase;
        d.switched_context = false;
        d.stop_next = false;
    }

    fn lifecycle(&self, callback: &str, ctx: u32, result: Option<i32>) {
        let d = self.store.data();
        d.env.process.lifecycle_call(LifecycleCall {
            vm: d.vm_name.clone(),
            callback: callback.into(),
            context_id: ctx,
            result,
        });
    }

    fn finish<T>(&mut self, r: wasmtime::Result<T>, f: impl FnOnce(T) -> i32) -> CallResult {
        self.store.data_mut().phase = Phase::None;
        r.map(f).map_err(|e| format!("{e:?}"))
    }

    /// A new root context (the next context id: 1 in a fresh VM, the next unused id in
    /// a reused one) for `plugin`, as cpp-host's `WasmBase::start` + `configure`: context
    /// create → on_vm_start (`ContextBase::onStart` runs it for every new root context)
    /// → on_configure. Returns the root context id.
    pub fn start_root(&mut self, plugin: &PluginConfig) -> Result<u32, StartError> {
        let root = self.next_context_id();
        let d = self.store.data_mut();
        d.roots.push(root);
        d.root_plugins.insert(root, plugin.clone());
        if let Some(f) = self.ex.on_context_create.clone() {
            self.enter(root, Phase::Root);
            // cpp-host `ContextBase::onStart` sets `temp_plugin_` around the root's
            // creation: its plugin configuration is served there (not in on_vm_start).
            self.store.data_mut().plugin_config = Some(plugin.configuration.clone().into_bytes());
            let r = f.call(&mut self.store, (root as i32, 0));
            self.store.data_mut().plugin_config = None;
            self.finish(r, |_| 0).map_err(StartError::Trap)?;
            self.lifecycle("proxy_on_context_create", root, None);
        }
        if let Some(f) = self.ex.on_vm_start.clone() {
            self.enter(root, Phase::VmStart);
            let r = f.call(
                &mut self.store,
                (root as i32, plugin.vm_configuration.len() as i32),
            );
            let r = self.finish(r, |v| v);
            self.lifecycle("proxy_on_vm_start", root, r.as_ref().ok().copied());
            if r.map_err(StartError::Trap)? == 0 {
                return Err(StartError::Rejected("on_vm_start returned false"));
            }
        }
        self.configure(root, plugin)?;
        Ok(root)
    }

    /// on_configure of root context `root` with `plugin`'s configuration.
    pub fn configure(&mut self, root: u32, plugin: &PluginConfig) -> Result<(), StartError> {
        let Some(f) = self.ex.on_configure.clone() else {
            return Ok(());
        };
        self.enter(root, Phase::Configure);
        self.store.data_mut().plugin_config = Some(plugin.configuration.clone().into_bytes());
        let r = f.call(
            &mut self.store,
            (root as i32, plugin.configuration.len() as i32),
        );
        self.store.data_mut().plugin_config = None;
        let r = self.finish(r, |v| v);
        self.lifecycle("proxy_on_configure", root, r.as_ref().ok().copied());
        if r.map_err(StartError::Trap)? == 0 {
            return Err(StartError::Rejected("on_configure returned false"));
        }
        Ok(())
    }

    /// cpp-host `WasmBase::startShutdown(plugin_key)`, run when a plugin handle is
    /// released: `on_done` on its root context, then `on_delete` if it returned true;
    /// otherwise the root waits for `proxy_done`. Err: a trap.
    pub fn shutdown_root(&mut self, root: u32) -> CallResult {
        let d = self.store.data_mut();
        d.roots.retain(|&r| r != root);
        let done = match self.ex.on_done.clone() {
            Some(f) => {
                self.enter(root, Phase::Root);
                let r = f.call(&mut self.store, root as i32);
                let r = self.finish(r, |v| v);
                self.lifecycle("proxy_on_done", root, r.as_ref().ok().copied());
                r? != 0
            }
            None => true,
        };
        if done {
            self.delete_root(root)
        } else {
            self.store.data_mut().pending_done.push(root);
            Ok(0)
        }
    }

    /// `on_delete` of a root context (`WasmBase::finishShutdown` for a pending one);
    /// its timer and callouts go with it (Envoy's `Context` destructor cancels its
    /// requests); queue notifications for it find no context any more.
    pub fn delete_root(&mut self, root: u32) -> CallResult {
        let d = self.store.data_mut();
        d.pending_done.retain(|&r| r != root);
        d.ticks.remove(&root);
        d.calls.retain(|_, c| c.root != root);
        d.grpc.retain(|_, g| g.root != root);
        let r = match self.ex.on_delete.clone() {
            Some(f) => {
                self.enter(root, Phase::Root);
                let r = f.call(&mut self.store, root as i32);
                let r = self.finish(r, |_| 0);
                self.lifecycle("proxy_on_delete", root, None);
                r
            }
            None => Ok(0),
        };
        self.store.data_mut().root_plugins.remove(&root);
        r
    }

    pub fn on_tick(&mut self, root: u32) -> CallResult {
        let Some(f) = self.ex.on_tick.clone() else {
            return Ok(0);
        };
        self.enter(root, Phase::Root);
        let r = f.call(&mut self.store, root as i32);
        self.finish(r, |_| 0)
    }

    pub fn on_queue_ready(&mut self, root: u32, queue: u32) -> CallResult {
        let Some(f) = self.ex.on_queue_ready.clone() else {
            return Ok(0);
        };
        self.enter(root, Phase::Root);
        let r = f.call(&mut self.store, (root as i32, queue as i32));
        self.finish(r, |_| 0)
    }

    pub fn on_context_create(&mut self, ctx: u32, root: u32) -> CallResult {
        let Some(f) = self.ex.on_context_create.clone() else {
            return Ok(0);
        };
        self.enter(ctx, Phase::RequestHeaders);
        let r = f.call(&mut self.store, (ctx as i32, root as i32));
        self.finish(r, |_| 0)
    }

    /// A stream callback: headers/body phases (returns the action).
    pub fn on_stream(&mut self, phase: Phase, ctx: u32, n: usize, eos: bool) -> CallResult {
        if matches!(phase, Phase::RequestTrailers | Phase::ResponseTrailers) {
            let f = if phase == Phase::RequestTrailers {
                self.ex.on_request_trailers.clone()
            } else {
                self.ex.on_response_trailers.clone()
            };
            let Some(f) = f else { return Ok(0) };
            self.enter(ctx, phase);
            let r = f.call(&mut self.store, (ctx as i32, n as i32));
            return self.finish(r, |v| v);
        }
        let f = match phase {
            Phase::RequestHeaders => self.ex.on_request_headers.clone(),
            Phase::RequestBody => self.ex.on_request_body.clone(),
            Phase::ResponseHeaders => self.ex.on_response_headers.clone(),
            Phase::ResponseBody => self.ex.on_response_body.clone(),
            _ => None,
        };
        let Some(f) = f else { return Ok(0) };
        self.enter(ctx, phase);
        self.store.data_mut().end_of_stream = eos;
        let r = f.call(&mut self.store, (ctx as i32, n as i32, eos as i32));
        self.store.data_mut().end_of_stream = false;
        self.finish(r, |v| v)
    }

    /// on_log (Phase::Log), on_done (Phase::Done) or on_delete (Phase::Delete).
    pub fn on_end(&mut self, phase: Phase, ctx: u32) -> CallResult {
        match phase {
            Phase::Log => {
                let Some(f) = self.ex.on_log.clone() else {
                    return Ok(0);
                };
                self.enter(ctx, phase);
                let r = f.call(&mut self.store, ctx as i32);
                self.finish(r, |_| 0)
            }
            Phase::Done => {
                let Some(f) = self.ex.on_done.clone() else {
                    return Ok(0);
                };
                self.enter(ctx, phase);
                let r = f.call(&mut self.store, ctx as i32);
                self.finish(r, |v| v)
            }
            _ => {
                let Some(f) = self.ex.on_delete.clone() else {
                    return Ok(0);
                };
                self.enter(ctx, Phase::Delete);
                let r = f.call(&mut self.store, ctx as i32);
                self.finish(r, |_| 0)
            }
        }
    }

    pub fn on_http_call_response(
        &mut self,
        root: u32,
        token: u32,
        resp: (HeaderMap, Vec<u8>, HeaderMap),
    ) -> CallResult {
        self.lifecycle("proxy_on_http_call_response", root, None);
        let Some(f) = self.ex.on_http_call_response.clone() else {
            return Ok(0);
        };
        let (nh, nb, nt) = (resp.0.len(), resp.1.len(), resp.2.len());
        self.enter(root, Phase::HttpCallResponse);
        self.store.data_mut().callback.http = Some(resp);
        let r = f.call(
            &mut self.store,
            (root as i32, token as i32, nh as i32, nb as i32, nt as i32),
        );
        self.store.data_mut().callback = CallbackData::default();
        self.finish(r, |_| 0)
    }

    /// One gRPC callout callback on root context `root`, with its data readable
    /// during the call.
    pub fn on_grpc(&mut self, root: u32, token: u32, ev: GrpcEvent) -> CallResult {
        let (name, f, arg, data) = match ev {
            GrpcEvent::InitialMetadata(m) => (
                "proxy_on_grpc_receive_initial_metadata",
                self.ex.on_grpc_receive_initial_metadata.clone(),
                m.len() as u32,
                CallbackData {
                    grpc_initial: Some(m),
                    ..Default::default()
                },
            ),
            GrpcEvent::Message(b) => (
                "proxy_on_grpc_receive",
                self.ex.on_grpc_receive.clone(),
                b.len() as u32,
                CallbackData {
                    grpc_message: Some(b),
                    ..Default::default()
                },
            ),
            GrpcEvent::TrailingMetadata(m) => (
                "proxy_on_grpc_receive_trailing_metadata",
                self.ex.on_grpc_receive_trailing_metadata.clone(),
                m.len() as u32,
                CallbackData {
                    grpc_trailing: Some(m),
                    ..Default::default()
                },
            ),
            GrpcEvent::Close(code, message) => {
                self.store.data_mut().status = (code, message);
                (
                    "proxy_on_grpc_close",
                    self.ex.on_grpc_close.clone(),
                    code,
                    CallbackData::default(),
                )
            }
        };
        self.lifecycle(name, root, None);
        let Some(f) = f else { return Ok(0) };
        self.enter(root, Phase::GrpcCallback);
        self.store.data_mut().callback = data;
        let r = f.call(&mut self.store, (root as i32, token as i32, arg as i32));
        self.store.data_mut().callback = CallbackData::default();
        self.finish(r, |_| 0)
    }
}

/// What a gRPC callout delivers to the guest, in Envoy's callback order.
pub(crate) enum GrpcEvent {
    InitialMetadata(HeaderMap),
    Message(Vec<u8>),
    TrailingMetadata(HeaderMap),
    Close(u32, String),
}
