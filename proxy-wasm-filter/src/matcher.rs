//! Which requests a policy applies to, and the key its state lives under.

use fusewire_core::json::Quoted;

/// What a matcher or key template may read from a request. Implemented over host calls
/// in the filter and over plain maps in tests.
pub trait RequestView {
    /// First value of a (lower-case) request header.
    fn header(&mut self, name: &str) -> Option<String>;
    /// Every value of a (lower-case) request header, joined with `,` in order — what
    /// Envoy's own header matchers read (`getAllOfHeaderAsString`). A client sending
    /// a header twice cannot be matched or keyed by one value while the upstream
    /// reads the other.
    fn header_all(&mut self, name: &str) -> Option<String> {
        self.header(name)
    }
    /// [`header_all`](Self::header_all) one-to-one: each byte that is not UTF-8
    /// becomes a NUL and that byte as a Latin-1 char (see [`host::push_text`]), not
    /// U+FFFD.
    ///
    /// [`host::push_text`]: crate::host::push_text
    fn header_exact(&mut self, name: &str) -> Option<String> {
        self.header_all(name)
    }
    /// Envoy's `xds.route_name`.
    fn route(&mut self) -> Option<String>;
    /// Envoy's `xds.cluster_name`.
    fn cluster(&mut self) -> Option<String>;
}

/// One header condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderCond {
    /// Value equals.
    Exact(String),
    /// Value starts with.
    Prefix(String),
    /// Header present (true) or absent (false).
    Present(bool),
}

/// All conditions must hold; each list matches if any entry does; an empty list or
/// absent field matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Matcher {
    /// Route names.
    pub routes: Vec<String>,
    /// Cluster names.
    pub clusters: Vec<String>,
    /// `:path` prefixes.
    pub path_prefixes: Vec<String>,
    /// Upper-case methods.
    pub methods: Vec<String>,
    /// Header conditions (lower-case names).
    pub headers: Vec<(String, HeaderCond)>,
}

impl Matcher {
    /// Whether the request matches. Cheap conditions (method, path, headers) are
    /// checked before properties (route, cluster).
    pub fn matches(&self, r: &mut impl RequestView) -> bool {
        if !self.methods.is_empty() {
            let m = r.header(":method").unwrap_or_default();
            if !self.methods.contains(&m) {
                return false;
            }
        }
        if !self.path_prefixes.is_empty() {
            let p = r.header(":path").unwrap_or_default();
            if !self.path_prefixes.iter().any(|x| p.starts_with(x.as_str())) {
                return false;
            }
        }
        for (name, cond) in &self.headers {
            let v = r.header_all(name);
            let ok = match cond {
                HeaderCond::Exact(e) => v.as_deref() == Some(e.as_str()),
                HeaderCond::Prefix(p) => v.is_some_and(|v| v.starts_with(p.as_str())),
                HeaderCond::Present(want) => v.is_some() == *want,
            };
            if !ok {
                return false;
            }
        }
        if !self.routes.is_empty() {
            // No route (or cluster) matches no name, `*` included.
            let v = r.route();
            if !v.is_some_and(|v| self.routes.iter().any(|g| glob(g, &v))) {
                return false;
            }
        }
        if !self.clusters.is_empty() {
            let v = r.cluster();
            if !v.is_some_and(|v| self.clusters.iter().any(|g| glob(g, &v))) {
                return false;
            }
        }
        true
    }

    /// Whether every request `later` matches, this matches too (so a policy with
    /// `later` placed after one with this never applies). Conservative: false
    /// where it cannot tell.
    pub fn covers(&self, later: &Matcher) -> bool {
        fn list(mine: &[String], theirs: &[String], by: &dyn Fn(&str, &str) -> bool) -> bool {
            mine.is_empty()
                || (!theirs.is_empty() && theirs.iter().all(|t| mine.iter().any(|m| by(m, t))))
        }
        // A later pattern read as a literal name: if it matches the earlier one, so
        // does every name it stands for (its `*`s fall inside the earlier `*`s).
        list(&self.methods, &later.methods, &|m, t| m == t)
            && list(&self.path_prefixes, &later.path_prefixes, &|m, t| {
                t.starts_with(m)
            })
            && list(&self.routes, &later.routes, &glob)
            && list(&self.clusters, &later.clusters, &glob)
            && self.headers.iter().all(|(name, mine)| {
                later.headers.iter().any(|(n, theirs)| {
                    n == name
                        && match (mine, theirs) {
                            (HeaderCond::Present(a), HeaderCond::Present(b)) => a == b,
                            (HeaderCond::Present(true), _) => true,
                            (HeaderCond::Exact(a), HeaderCond::Exact(b)) => a == b,
                            (
                                HeaderCond::Prefix(a),
                                HeaderCond::Exact(b) | HeaderCond::Prefix(b),
                            ) => b.starts_with(a.as_str()),
                            _ => false,
                        }
                })
            })
    }
}

/// Whether `name` matches `pattern`, where each `*` stands for any run of characters
/// (none included) and everything else is literal: Istio's subsets of one service,
/// `outbound|9080|*|reviews.default.svc.cluster.local` (found by an Istio operator's
/// review: exact names missed the subset clusters a VirtualService routes to).
pub fn glob(pattern: &str, name: &str) -> bool {
    // Bytes, and a plain scan: `str::find` brings a substring searcher of ≈ 9 KB
    // into the module.
    let mut parts = pattern.as_bytes().split(|&b| b == b'*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.as_bytes().strip_prefix(first) else {
        return false;
    };
    let mut last = None;
    for part in parts {
        if let Some(prev) = last.replace(part) {
            match (0..=rest.len()).find(|&i| rest.get(i..).is_some_and(|r| r.starts_with(prev))) {
                Some(i) => rest = rest.get(i + prev.len()..).unwrap_or_default(),
                None => return false,
            }
        }
    }
    match last {
        None => rest.is_empty(),
        Some(end) => rest.ends_with(end),
    }
}

/// One piece of a key template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// Literal text.
    Lit(String),
    /// `{policy}`.
    Policy,
    /// `{cluster}`.
    Cluster,
    /// `{route}`.
    Route,
    /// `{method}`.
    Method,
    /// `{authority}`.
    Authority,
    /// `{path}` (`:path`, query included).
    Path,
    /// `{header:NAME}`.
    Header(String),
}

/// How a policy's key is built: `"policy"` (one breaker for the policy),
/// `"cluster"` (`{policy}/{cluster}`), `"route"` (`{policy}/{route}`) or a template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeySpec {
    /// Parsed template.
    pub parts: Vec<Part>,
}

/// A lower-case header name (a leading `:` for pseudo-headers; found by review: `x:y`
/// passed).
pub fn valid_header_name(s: &str) -> bool {
    let name = s.strip_prefix(':').unwrap_or(s);
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b))
}

impl KeySpec {
    /// Whether a name this renders for policy `name` — or its overflow key's,
    /// `name/~overflow` — can be one `other` renders for policy `other_name`. Read
    /// with `{policy}` as the name and any other placeholder as any text, their fixed
    /// starts and ends must agree as far as both go. Conservative: false only where
    /// no request can make them meet (found by review: a `{policy}` anywhere counted
    /// as apart, but `{header:x}` renders `orders` as well as policy `orders`).
    pub fn may_share_names(&self, name: &str, other: &KeySpec, other_name: &str) -> bool {
        // A name's fixed start and end (the text before its first placeholder and
        // after its last), and whether it has no placeholder at all.
        fn shapes(k: &KeySpec, name: &str) -> [(String, String, bool); 2] {
            let (mut head, mut tail, mut wild) = (String::new(), String::new(), false);
            for p in &k.parts {
                let s = match p {
                    Part::Lit(s) => s,
                    Part::Policy => name,
                    _ => {
                        wild = true;
                        tail.clear();
                        continue;
                    }
                };
                tail.push_str(s);
                if !wild {
                    head.push_str(s);
                }
            }
            let mut overflow = name.to_string();
            overflow.push_str("/~overflow");
            [(head, tail, !wild), (overflow.clone(), overflow, true)]
        }
        let (a, b) = (shapes(self, name), shapes(other, other_name));
        a.iter().any(|(h1, t1, w1)| {
            b.iter().any(|(h2, t2, w2)| match w1 & w2 {
                true => h1 == h2,
                false => {
                    (h1.starts_with(h2.as_str()) || h2.starts_with(h1.as_str()))
                        && (t1.ends_with(t2.as_str()) || t2.ends_with(t1.as_str()))
                }
            })
        })
    }

    /// Whether every request header a response's `Vary` names (comma-separated, any
    /// case) is part of this key, so requests of one key get one representation.
    /// `Vary: *` never is.
    pub fn covers_vary(&self, vary: &str) -> bool {
        vary.split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .all(|n| {
                self.parts
                    .iter()
                    .any(|p| matches!(p, Part::Header(h) if h.eq_ignore_ascii_case(n)))
            })
    }

    /// Parses `"policy"`, `"cluster"`, `"route"` or a template with placeholders.
    pub fn parse(s: &str) -> Result<Self, String> {
        let t = match s {
            "policy" => "{policy}",
            "cluster" => "{policy}/{cluster}",
            "route" => "{policy}/{route}",
            t if t.contains('{') => t,
            other => {
                return Err(fusewire_core::text!(
                    "must be \"policy\", \"cluster\", \"route\" or a template with {{placeholders}}, got {}",
                    Quoted(other)
                ))
            }
        };
        let mut parts = Vec::new();
        let mut rest = t;
        while let Some((lit, after)) = rest.split_once('{') {
            if !lit.is_empty() {
                if lit.contains('}') {
                    return Err(fusewire_core::text!(
                        "unmatched '}}' in key template {}",
                        Quoted(t)
                    ));
                }
                parts.push(Part::Lit(lit.to_string()));
            }
            let (name, tail) = after.split_once('}').ok_or_else(|| {
                fusewire_core::text!("unclosed '{{' in key template {}", Quoted(t))
            })?;
            parts.push(match name {
                "policy" => Part::Policy,
                "cluster" => Part::Cluster,
                "route" => Part::Route,
                "method" => Part::Method,
                "authority" => Part::Authority,
                "path" => Part::Path,
                h if h.starts_with("header:") => {
                    let n = h.get(7..).unwrap_or_default().to_ascii_lowercase();
                    // Found by review: `{header:x-tenant }` rendered `-` for everyone.
                    if !valid_header_name(&n) {
                        return Err(fusewire_core::text!("{{{h}}}: not a header name"));
                    }
                    Part::Header(n)
                }
                other => {
                    return Err(fusewire_core::text!(
                        "unknown placeholder {{{other}}} (known: policy cluster route method authority path header:NAME)"
                    ))
                }
            });
            rest = tail;
        }
        if rest.contains('}') {
            return Err(fusewire_core::text!(
                "unmatched '}}' in key template {}",
                Quoted(t)
            ));
        }
        if !rest.is_empty() {
            parts.push(Part::Lit(rest.to_string()));
        }
        Ok(KeySpec { parts })
    }

    /// Whether `{path}` is part of the key.
    pub fn has_path(&self) -> bool {
        self.parts.contains(&Part::Path)
    }

    /// Whether the key depends on the request (otherwise it is the same for every
    /// request of the policy).
    pub fn is_static(&self) -> bool {
        self.parts
            .iter()
            .all(|p| matches!(p, Part::Lit(_) | Part::Policy))
    }

    /// Builds the key into `out` (cleared first). Missing values render as `-`. Never
    /// cut: a request key past the cache's `max_key_bytes` bypasses it, and the engine
    /// bounds breaker key names itself (`bounded_name`), so two requests never share a
    /// key because their first bytes agree.
    pub fn render(&self, policy: &str, r: &mut impl RequestView, out: &mut String) {
        self.render_as(policy, r, out, false);
    }

    /// [`Template::render`] one-to-one, for request keys: each value follows a NUL
    /// (which no header value or path holds), then `\x01` if missing or `\x02` and the
    /// value, read with [`RequestView::header_exact`] (found by a security review: a
    /// value `-` and a missing one, values sharing their edges with the template's
    /// text, or values differing only in bytes that are not UTF-8 gave two requests
    /// one key, and one's response answered the other).
    pub fn render_exact(&self, policy: &str, r: &mut impl RequestView, out: &mut String) {
        self.render_as(policy, r, out, true);
    }

    fn render_as(&self, policy: &str, r: &mut impl RequestView, out: &mut String, exact: bool) {
        fn header(r: &mut impl RequestView, name: &str, exact: bool) -> Option<String> {
            match exact {
                true => r.header_exact(name),
                false => r.header(name),
            }
        }
        out.clear();
        for p in &self.parts {
            let v = match p {
                Part::Lit(s) => {
                    out.push_str(s);
                    continue;
                }
                Part::Policy => {
                    out.push_str(policy);
                    continue;
                }
                Part::Cluster => r.cluster(),
                Part::Route => r.route(),
                Part::Method => header(r, ":method", exact),
                Part::Authority => header(r, ":authority", exact),
                Part::Path => header(r, ":path", exact),
                Part::Header(h) if exact => r.header_exact(h),
                Part::Header(h) => r.header_all(h),
            };
            match v {
                Some(v) if exact => {
                    out.push_str("\0\x02");
                    out.push_str(&v);
                }
                None if exact => out.push_str("\0\x01"),
                Some(v) if !v.is_empty() => out.push_str(&v),
                _ => out.push('-'),
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::HashMap;

    #[derive(Default)]
    pub struct MapView {
        pub headers: HashMap<String, String>,
        pub route: Option<String>,
        pub cluster: Option<String>,
        pub property_reads: u32,
    }

    impl RequestView for MapView {
        fn header(&mut self, name: &str) -> Option<String> {
            self.headers.get(name).cloned()
        }
        fn route(&mut self) -> Option<String> {
            self.property_reads += 1;
            self.route.clone()
        }
        fn cluster(&mut self) -> Option<String> {
            self.property_reads += 1;
            self.cluster.clone()
        }
    }

    /// Request keys read every header value with `header_exact`; breaker keys do not.
    #[test]
    fn request_keys_read_values_exactly() {
        struct Exact;
        impl RequestView for Exact {
            fn header(&mut self, name: &str) -> Option<String> {
                Some(format!("~{name}"))
            }
            fn header_exact(&mut self, name: &str) -> Option<String> {
                Some(format!("={name}"))
            }
            fn route(&mut self) -> Option<String> {
                None
            }
            fn cluster(&mut self) -> Option<String> {
                None
            }
        }
        let t = KeySpec::parse("{method}{authority}{path}{header:x}").unwrap();
        let mut out = String::new();
        t.render("p", &mut Exact, &mut out);
        assert_eq!(out, "~:method~:authority~:path~x");
        t.render_exact("p", &mut Exact, &mut out);
        assert_eq!(out, "\0\x02=:method\0\x02=:authority\0\x02=:path\0\x02=x");
    }

    pub fn view(method: &str, path: &str, cluster: &str) -> MapView {
        let mut v = MapView::default();
        v.headers.insert(":method".into(), method.into());
        v.headers.insert(":path".into(), path.into());
        v.headers.insert(":authority".into(), "api.example".into());
        v.cluster = Some(cluster.into());
        v.route = Some("r1".into());
        v
    }

    #[test]
    fn matching() {
        let m = Matcher {
            methods: vec!["GET".into(), "POST".into()],
            path_prefixes: vec!["/orders".into()],
            clusters: vec!["orders".into()],
            headers: vec![
                ("x-tier".into(), HeaderCond::Exact("gold".into())),
                ("x-debug".into(), HeaderCond::Present(false)),
            ],
            ..Default::default()
        };
        let mut ok = view("GET", "/orders/1", "orders");
        ok.headers.insert("x-tier".into(), "gold".into());
        assert!(m.matches(&mut ok));
        let mut wrong_method = view("DELETE", "/orders/1", "orders");
        wrong_method.headers.insert("x-tier".into(), "gold".into());
        assert!(!m.matches(&mut wrong_method));
        assert_eq!(
            wrong_method.property_reads, 0,
            "properties only read when needed"
        );
        let mut no_header = view("GET", "/orders/1", "orders");
        assert!(!m.matches(&mut no_header));
        let mut debug = view("GET", "/orders/1", "orders");
        debug.headers.insert("x-tier".into(), "gold".into());
        debug.headers.insert("x-debug".into(), "1".into());
        assert!(!m.matches(&mut debug));
        let mut other_cluster = view("GET", "/orders/1", "users");
        other_cluster.headers.insert("x-tier".into(), "gold".into());
        assert!(!m.matches(&mut other_cluster));
        assert!(Matcher::default().matches(&mut view("PUT", "/", "x")));
    }

    #[test]
    fn an_earlier_matcher_covers_a_later_one_only_when_it_matches_all_it_would() {
        let m = |json: &str| {
            crate::config::Plugin::parse(
                format!(r#"{{"policies":[{{"name":"p","match":{json}}}]}}"#).as_bytes(),
            )
            .map(|p| p.policies[0].matcher.clone())
            .unwrap()
        };
        let all = Matcher::default();
        let gets = m(r#"{"method":"GET"}"#);
        let orders = m(r#"{"method":["GET","POST"],"path_prefix":"/orders"}"#);
        let orders_get = m(r#"{"method":"GET","path_prefix":"/orders/v2","cluster":"orders"}"#);
        let subsets = m(r#"{"cluster":"outbound|9080|*|reviews"}"#);
        let v1 = m(r#"{"cluster":["outbound|9080|v1|reviews"]}"#);
        let gold = m(r#"{"headers":[{"name":"x-tier","prefix":"go"}]}"#);
        let gold_exact =
            m(r#"{"headers":[{"name":"x-tier","exact":"gold"},{"name":"x-a","present":false}]}"#);
        let tiered = m(r#"{"headers":[{"name":"x-tier","present":true}]}"#);
        for (a, b, want) in [
            (&all, &gets, true),
            (&gets, &all, false),
            (&orders, &orders_get, true),
            (&orders_get, &orders, false),
            (&gets, &orders, false),
            (&subsets, &v1, true),
            (&v1, &subsets, false),
            (&tiered, &gold, true),
            (&gold, &gold_exact, true),
            (&gold_exact, &gold, false),
            (&gold, &tiered, false),
            (&gold, &all, false),
        ] {
            assert_eq!(a.covers(b), want, "{a:?} covers {b:?}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(2_000))]
        /// Soundness: if `a` covers `b`, every request `b` matches, `a` matches.
        #[test]
        fn covers_never_claims_a_request_the_earlier_matcher_misses(
            a in arb_matcher(), b in arb_matcher(), reqs in proptest::collection::vec(arb_request(), 1..24)
        ) {
            if a.covers(&b) {
                for (method, path, route, cluster, tier) in reqs {
                    let mut v = MapView::default();
                    v.headers.insert(":method".into(), method.into());
                    v.headers.insert(":path".into(), path.into());
                    if let Some(t) = tier {
                        v.headers.insert("x-tier".into(), t.into());
                    }
                    v.route = route.map(Into::into);
                    v.cluster = cluster.map(Into::into);
                    if b.matches(&mut v) {
                        proptest::prop_assert!(a.matches(&mut v), "{a:?} covers {b:?}, misses {:?}", v.headers);
                    }
                }
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(2_000))]
        /// Soundness: two policies' keys that render one name (or a policy's overflow
        /// name) for some requests are said to share names.
        #[test]
        fn names_two_keys_render_alike_are_said_to_be_shared(
            a in arb_key(), b in arb_key(),
            names in proptest::sample::select(&[("a", "b"), ("a", "ab"), ("ab", "b"), ("a/b", "a")][..]),
            values in proptest::collection::vec((arb_value(), arb_value()), 1..12),
        ) {
            let (na, nb) = names;
            let render = |k: &KeySpec, name: &str, (path, x): &(&str, &str)| {
                let mut v = MapView::default();
                v.headers.insert(":path".into(), path.to_string());
                v.headers.insert("x".into(), x.to_string());
                let mut out = String::new();
                k.render(name, &mut v, &mut out);
                out
            };
            let mut of_a: Vec<String> = values.iter().map(|v| render(&a, na, v)).collect();
            of_a.push(format!("{na}/~overflow"));
            let mut of_b: Vec<String> = values.iter().map(|v| render(&b, nb, v)).collect();
            of_b.push(format!("{nb}/~overflow"));
            if let Some(n) = of_a.iter().find(|n| of_b.contains(n)) {
                proptest::prop_assert!(a.may_share_names(na, &b, nb), "{a:?} / {b:?} both render {n}");
                proptest::prop_assert!(b.may_share_names(nb, &a, na), "{b:?} / {a:?} both render {n}");
            }
        }
    }

    fn arb_value() -> impl proptest::strategy::Strategy<Value = &'static str> {
        proptest::sample::select(
            &[
                "",
                "a",
                "b",
                "/",
                "ab",
                "a/",
                "/b",
                "a/b",
                "-",
                "/~overflow",
                "b/~overflow",
            ][..],
        )
    }

    fn arb_key() -> impl proptest::strategy::Strategy<Value = KeySpec> {
        let part = proptest::prop_oneof![
            proptest::sample::select(&["a", "b", "/", "-", "/~overflow"][..])
                .prop_map(|s| Part::Lit(s.into())),
            proptest::strategy::Just(Part::Policy),
            proptest::strategy::Just(Part::Path),
            proptest::strategy::Just(Part::Header("x".into())),
        ];
        proptest::collection::vec(part, 1..4).prop_map(|parts| KeySpec { parts })
    }

    /// Half the time empty (any), so that one matcher often covers another.
    fn pick(
        from: &'static [&'static str],
    ) -> impl proptest::strategy::Strategy<Value = Vec<String>> {
        proptest::prop_oneof![
            proptest::strategy::Just(Vec::new()),
            proptest::collection::vec(proptest::sample::select(from).prop_map(String::from), 1..3),
        ]
    }

    use proptest::strategy::Strategy as _;

    fn arb_matcher() -> impl proptest::strategy::Strategy<Value = Matcher> {
        let cond = proptest::prop_oneof![
            proptest::sample::select(&["", "g", "go", "gold", "s"][..])
                .prop_map(|v| HeaderCond::Exact(v.into())),
            proptest::sample::select(&["", "g", "go", "gold", "s"][..])
                .prop_map(|v| HeaderCond::Prefix(v.into())),
            proptest::bool::ANY.prop_map(HeaderCond::Present),
        ];
        (
            pick(&["GET", "POST"]),
            pick(&["/", "/a", "/ab", "/b"]),
            pick(&["r", "r*", "*", "r1", "*1"]),
            pick(&["c", "c*", "*", "c|*|x", "c|1|x"]),
            proptest::collection::vec(cond, 0..2),
        )
            .prop_map(
                |(methods, path_prefixes, routes, clusters, conds)| Matcher {
                    methods,
                    path_prefixes,
                    routes,
                    clusters,
                    headers: conds
                        .into_iter()
                        .map(|c| ("x-tier".to_string(), c))
                        .collect(),
                },
            )
    }

    #[allow(clippy::type_complexity)]
    fn arb_request() -> impl proptest::strategy::Strategy<
        Value = (
            &'static str,
            &'static str,
            Option<&'static str>,
            Option<&'static str>,
            Option<&'static str>,
        ),
    > {
        (
            proptest::sample::select(&["GET", "POST", "PUT"][..]),
            proptest::sample::select(&["/", "/a", "/ab", "/abc", "/b", "/c"][..]),
            proptest::option::of(proptest::sample::select(&["r", "r1", "rr1", "x1", ""][..])),
            proptest::option::of(proptest::sample::select(
                &["c", "c|1|x", "c|2|x", "c||x", "d"][..],
            )),
            proptest::option::of(proptest::sample::select(
                &["", "g", "go", "gold", "golden", "s"][..],
            )),
        )
    }

    #[test]
    fn cluster_and_route_names_match_with_wildcards() {
        let reviews = "outbound|9080|*|reviews.default.svc.cluster.local";
        for (name, want) in [
            ("outbound|9080||reviews.default.svc.cluster.local", true),
            ("outbound|9080|v1|reviews.default.svc.cluster.local", true),
            ("outbound|9080|v1|ratings.default.svc.cluster.local", false),
            ("inbound|9080||reviews.default.svc.cluster.local", false),
            (
                "outbound|9080|v1|reviews.default.svc.cluster.local.evil",
                false,
            ),
        ] {
            assert_eq!(glob(reviews, name), want, "{name}");
        }
        for (pattern, name, want) in [
            ("orders", "orders", true),
            ("orders", "orders-v2", false),
            ("orders*", "orders-v2", true),
            ("*", "", true),
            ("*-v2", "orders-v2", true),
            ("*-v2", "orders-v3", false),
            ("a*b*c", "abc", true),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "acb", false),
            ("ab*ba", "aba", false),
            ("**", "x", true),
            ("é*ü", "éaü", true),
        ] {
            assert_eq!(glob(pattern, name), want, "{pattern} ~ {name}");
        }
        let m = Matcher {
            clusters: vec![reviews.into()],
            routes: vec!["reviews-*".into()],
            ..Default::default()
        };
        let mut v = view(
            "GET",
            "/",
            "outbound|9080|v2|reviews.default.svc.cluster.local",
        );
        v.route = Some("reviews-canary".into());
        assert!(m.matches(&mut v));
        v.route = Some("ratings".into());
        assert!(!m.matches(&mut v));
    }

    #[test]
    fn a_request_without_a_route_or_cluster_matches_no_name_not_even_star() {
        for (clusters, routes) in [(vec!["*".to_string()], vec![]), (vec![], vec!["*".into()])] {
            let m = Matcher {
                clusters,
                routes,
                ..Default::default()
            };
            let mut v = view("GET", "/", "c");
            assert!(m.matches(&mut v));
            v.cluster = None;
            v.route = None;
            assert!(!m.matches(&mut v), "{:?} {:?}", m.clusters, m.routes);
        }
    }

    #[test]
    fn keys() {
        let mut v = view("GET", "/a", "orders");
        let mut out = String::new();
        KeySpec::parse("cluster")
            .unwrap()
            .render("p", &mut v, &mut out);
        assert_eq!(out, "p/orders");
        KeySpec::parse("route")
            .unwrap()
            .render("p", &mut v, &mut out);
        assert_eq!(out, "p/r1");
        KeySpec::parse("policy")
            .unwrap()
            .render("p", &mut v, &mut out);
        assert_eq!(out, "p");
        let t = KeySpec::parse("{cluster}:{method}@{authority}/{header:X-Tenant}").unwrap();
        t.render("p", &mut v, &mut out);
        assert_eq!(out, "orders:GET@api.example/-");
        assert!(!t.is_static());
        assert!(KeySpec::parse("static-{policy}").unwrap().is_static());
        assert!(KeySpec::parse("byhost").unwrap_err().contains("template"));
        assert!(KeySpec::parse("{nope}")
            .unwrap_err()
            .contains("unknown placeholder"));
        assert!(KeySpec::parse("{cluster").unwrap_err().contains("unclosed"));
        assert!(KeySpec::parse("{cluster}}")
            .unwrap_err()
            .contains("unmatched"));
        v.headers.insert("x-tenant".into(), "é".repeat(150));
        t.render("p", &mut v, &mut out);
        assert!(out.contains(&"é".repeat(150)), "whole: {out}");
    }

    #[test]
    fn a_key_covers_the_headers_it_holds() {
        let k = KeySpec::parse("{path} {header:accept-encoding} {header:Accept}").unwrap();
        assert!(k.covers_vary("Accept-Encoding"));
        assert!(k.covers_vary("accept, accept-encoding"));
        assert!(!k.covers_vary("accept-encoding, accept-language"));
        assert!(!k.covers_vary("*"));
        assert!(k.covers_vary(""), "an empty Vary varies on nothing");
        assert!(!KeySpec::parse("{path}").unwrap().covers_vary("origin"));
    }
}
