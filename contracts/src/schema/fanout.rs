//! The fan-out bound of a schema: how many of its subschemas can apply to one instance value,
//! following `anyOf`/`oneOf`/`allOf`/`$ref` (references resolved inside the document only,
//! through embedded `$id`s), for the worst instance path. A schema over
//! [`SchemaLimits::max_fanout`](super::SchemaLimits::max_fanout) is refused at admission.

use super::*;

/// Base URI of a document without `$id`. Only used to resolve relative references; never
/// fetched.
const DEFAULT_BASE_URI: &str = "https://schema.hiregate.invalid/output.json";

/// Keywords whose subschemas apply to the same instance.
const IN_PLACE_SINGLE: &[&str] = &["not", "if", "then", "else"];
const IN_PLACE_ARRAY: &[&str] = &["allOf", "anyOf", "oneOf"];
const IN_PLACE_MAP: &[&str] = &["dependentSchemas", "dependencies"];
/// Keywords whose subschemas apply to children of the instance.
const CHILD_SINGLE: &[&str] = &[
    "additionalProperties",
    "propertyNames",
    "contains",
    "unevaluatedItems",
    "unevaluatedProperties",
    "additionalItems",
    "contentSchema",
];
const CHILD_MAP: &[&str] = &["properties", "patternProperties"];
/// Keywords holding subschemas that apply only through references.
const DEFINITION_MAP: &[&str] = &["$defs", "definitions"];

/// Which children of the instance a child-applying subschema can reach.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Selector {
    /// The member named so (`properties/<name>`).
    Named(String),
    /// The array element at this index (`prefixItems/<i>`, tuple `items/<i>`).
    Index(usize),
    /// Potentially any child (`items`, `additionalProperties`, `patternProperties`, …).
    /// Pattern and "additional" keywords are treated as matching every child: an over-count,
    /// never an under-count.
    Any,
}

/// How a subschema applies relative to its parent.
enum Role {
    /// To the same instance.
    InPlace,
    /// To children of the instance.
    Child(Selector),
    /// Only through references (`$defs`, `definitions`).
    Definition,
}

#[derive(Default)]
struct Edges {
    in_place: Vec<String>,
    child: Vec<(Selector, String)>,
}

pub(super) struct FanOutAnalysis<'a> {
    root: &'a Value,
    draft: SchemaDraft,
    /// Absolute resource URI (no fragment) → pointer of the resource root.
    resources: HashMap<String, String>,
    /// (resource URI, anchor name) → pointer.
    anchors: HashMap<(String, String), String>,
    /// `$dynamicAnchor` name → every pointer carrying it (the dynamic scope may pick any).
    dynamic_anchors: HashMap<String, Vec<String>>,
    /// Resource roots with `"$recursiveAnchor": true` (draft 2019-09).
    recursive_anchors: Vec<String>,
    /// Base URI in scope at each indexed subschema.
    bases: HashMap<String, String>,
}

/// Every subschema position of `value` with its pointer suffix and how it applies.
fn subschemas(value: &Value) -> Vec<(String, &Value, Role)> {
    let mut out = Vec::new();
    let Value::Object(map) = value else {
        return out;
    };
    let is_schema = |v: &Value| v.is_object() || v.is_boolean();
    for (key, child) in map {
        let key_str = key.as_str();
        let token = escape_pointer_token(key_str);
        if IN_PLACE_SINGLE.contains(&key_str) && is_schema(child) {
            out.push((format!("/{token}"), child, Role::InPlace));
        } else if CHILD_SINGLE.contains(&key_str) && is_schema(child) {
            out.push((format!("/{token}"), child, Role::Child(Selector::Any)));
        } else if IN_PLACE_ARRAY.contains(&key_str) {
            if let Value::Array(items) = child {
                for (i, item) in items.iter().enumerate().filter(|(_, v)| is_schema(v)) {
                    out.push((format!("/{token}/{i}"), item, Role::InPlace));
                }
            }
        } else if key_str == "prefixItems" || key_str == "items" {
            match child {
                Value::Array(items) => {
                    for (i, item) in items.iter().enumerate().filter(|(_, v)| is_schema(v)) {
                        let role = Role::Child(Selector::Index(i));
                        out.push((format!("/{token}/{i}"), item, role));
                    }
                }
                other if key_str == "items" && is_schema(other) => {
                    out.push(("/items".to_owned(), other, Role::Child(Selector::Any)));
                }
                _ => {}
            }
        } else if (IN_PLACE_MAP.contains(&key_str)
            || CHILD_MAP.contains(&key_str)
            || DEFINITION_MAP.contains(&key_str))
            && let Value::Object(entries) = child
        {
            for (name, item) in entries.iter().filter(|(_, v)| is_schema(v)) {
                let role = if IN_PLACE_MAP.contains(&key_str) {
                    Role::InPlace
                } else if key_str == "properties" {
                    Role::Child(Selector::Named(name.clone()))
                } else if CHILD_MAP.contains(&key_str) {
                    Role::Child(Selector::Any)
                } else {
                    Role::Definition
                };
                out.push((
                    format!("/{token}/{}", escape_pointer_token(name)),
                    item,
                    role,
                ));
            }
        }
    }
    out
}

impl<'a> FanOutAnalysis<'a> {
    pub(super) fn new(root: &'a Value, draft: SchemaDraft) -> Result<Self, SchemaError> {
        let mut analysis = Self {
            root,
            draft,
            resources: HashMap::new(),
            anchors: HashMap::new(),
            dynamic_anchors: HashMap::new(),
            recursive_anchors: Vec::new(),
            bases: HashMap::new(),
        };
        analysis.index()?;
        Ok(analysis)
    }

    /// Records every resource (`$id`), anchor and the base URI of every subschema.
    fn index(&mut self) -> Result<(), SchemaError> {
        let default_base = url::Url::parse(DEFAULT_BASE_URI).map_err(|e| SchemaError::Invalid {
            message: e.to_string(),
        })?;
        let mut stack: Vec<(&'a Value, String, url::Url)> =
            vec![(self.root, String::new(), default_base)];
        let mut first = true;
        while let Some((value, pointer, inherited_base)) = stack.pop() {
            let mut base = inherited_base;
            if let Value::Object(map) = value {
                if let Some(Value::String(id)) = map.get(self.draft.id_keyword()) {
                    if let Some(anchor) = id.strip_prefix('#') {
                        // Drafts 4–7 spell plain-name anchors as `$id: "#name"`.
                        if !anchor.is_empty() {
                            self.anchors
                                .insert((resource_key(&base), anchor.to_owned()), pointer.clone());
                        }
                    } else {
                        base = base.join(id).map_err(|_| SchemaError::UnresolvableRef {
                            pointer: pointer.clone(),
                            reference: id.clone(),
                        })?;
                        base.set_fragment(None);
                        self.resources.insert(resource_key(&base), pointer.clone());
                    }
                }
                if first {
                    // The document root is a resource whether or not it has an `$id`.
                    self.resources.entry(resource_key(&base)).or_default();
                    first = false;
                }
                if self.draft.has_anchor_keyword() {
                    if let Some(Value::String(name)) = map.get("$anchor") {
                        self.anchors
                            .insert((resource_key(&base), name.clone()), pointer.clone());
                    }
                    if let Some(Value::String(name)) = map.get("$dynamicAnchor") {
                        self.anchors
                            .insert((resource_key(&base), name.clone()), pointer.clone());
                        self.dynamic_anchors
                            .entry(name.clone())
                            .or_default()
                            .push(pointer.clone());
                    }
                    if map.get("$recursiveAnchor") == Some(&Value::Bool(true)) {
                        self.recursive_anchors.push(pointer.clone());
                    }
                }
            }
            self.bases.insert(pointer.clone(), base.to_string());
            for (suffix, child, _) in subschemas(value) {
                stack.push((child, format!("{pointer}{suffix}"), base.clone()));
            }
        }
        Ok(())
    }

    fn base_for(&self, pointer: &str) -> String {
        // Nodes reached only through a pointer into an unindexed place inherit the base of
        // their nearest indexed ancestor.
        let mut current = pointer;
        loop {
            if let Some(base) = self.bases.get(current) {
                return base.clone();
            }
            match current.rfind('/') {
                Some(cut) => current = &current[..cut],
                None => return DEFAULT_BASE_URI.to_owned(),
            }
        }
    }

    fn resolve(&self, at: &str, reference: &str) -> Result<String, SchemaError> {
        let unresolvable = || SchemaError::UnresolvableRef {
            pointer: at.to_owned(),
            reference: reference.to_owned(),
        };
        let base = url::Url::parse(&self.base_for(at)).map_err(|_| unresolvable())?;
        let mut target = base.join(reference).map_err(|_| unresolvable())?;
        let fragment = target.fragment().map(percent_decode).transpose();
        let fragment = fragment.map_err(|()| unresolvable())?.unwrap_or_default();
        target.set_fragment(None);
        let resource_key = resource_key(&target);
        let resource = self.resources.get(&resource_key).ok_or_else(unresolvable)?;
        let pointer = if fragment.is_empty() {
            resource.clone()
        } else if fragment.starts_with('/') {
            format!("{resource}{fragment}")
        } else {
            self.anchors
                .get(&(resource_key, fragment))
                .cloned()
                .ok_or_else(unresolvable)?
        };
        match self.root.pointer(&pointer) {
            Some(node) if node.is_object() || node.is_boolean() => Ok(pointer),
            _ => Err(unresolvable()),
        }
    }

    fn edges(&self, pointer: &str) -> Result<Edges, SchemaError> {
        let mut edges = Edges::default();
        let Some(node) = self.root.pointer(pointer) else {
            return Ok(edges);
        };
        for (suffix, _, role) in subschemas(node) {
            match role {
                Role::InPlace => edges.in_place.push(format!("{pointer}{suffix}")),
                Role::Child(selector) => edges.child.push((selector, format!("{pointer}{suffix}"))),
                Role::Definition => {}
            }
        }
        let Value::Object(map) = node else {
            return Ok(edges);
        };
        if let Some(Value::String(reference)) = map.get("$ref") {
            edges.in_place.push(self.resolve(pointer, reference)?);
        }
        if let Some(Value::String(reference)) = map.get("$dynamicRef") {
            edges.in_place.push(self.resolve(pointer, reference)?);
            let name = reference.rsplit('#').next().unwrap_or_default();
            if let Some(targets) = self.dynamic_anchors.get(name) {
                edges.in_place.extend(targets.iter().cloned());
            }
        }
        if let Some(Value::String(reference)) = map.get("$recursiveRef") {
            edges.in_place.push(self.resolve(pointer, reference)?);
            edges
                .in_place
                .extend(self.recursive_anchors.iter().cloned());
        }
        Ok(edges)
    }

    /// Explores the worst case over instance paths: a state is the multiset of schema nodes
    /// applying to one instance node; its children's states follow each possible child key.
    /// Fails when a state holds more than `limit` applications. States are de-duplicated on
    /// the part that matters for descendants, so recursive schemas settle into a fixpoint
    /// unless their fan-out grows (which is exactly what must be refused).
    pub(super) fn check(&self, limit: u64) -> Result<(), SchemaError> {
        let mut edge_cache: HashMap<String, Edges> = HashMap::new();
        let mut visited: std::collections::HashSet<Vec<(String, u64)>> =
            std::collections::HashSet::new();
        let mut frontier: Vec<HashMap<String, u64>> = vec![HashMap::from([(String::new(), 1)])];
        let mut closures = 0usize;
        for _depth in 0..=MAX_INSTANCE_DEPTH {
            let mut next_frontier = Vec::new();
            for seeds in frontier {
                closures += 1;
                if closures > MAX_ANALYSIS_STATES {
                    return Err(SchemaError::TooComplex);
                }
                let totals = self.close_in_place(&seeds, &mut edge_cache)?;
                let applications = totals
                    .values()
                    .fold(0u64, |sum, count| sum.saturating_add(*count));
                if applications > limit {
                    return Err(SchemaError::FanOutTooLarge {
                        fanout: applications,
                        limit,
                    });
                }
                // Only nodes that apply to children shape the future.
                let mut relevant: Vec<(String, u64)> = totals
                    .into_iter()
                    .filter(|(pointer, _)| {
                        edge_cache
                            .get(pointer)
                            .is_some_and(|edges| !edges.child.is_empty())
                    })
                    .collect();
                if relevant.is_empty() {
                    continue;
                }
                relevant.sort_unstable();
                if !visited.insert(relevant.clone()) {
                    continue;
                }
                next_frontier.extend(Self::children_states(&relevant, &edge_cache));
            }
            if next_frontier.is_empty() {
                return Ok(());
            }
            frontier = next_frontier;
        }
        Ok(())
    }

    /// The seed states of the children of an instance node in state `relevant`: one for a
    /// child no keyword names, one per named member, one per tuple index.
    fn children_states(
        relevant: &[(String, u64)],
        edge_cache: &HashMap<String, Edges>,
    ) -> Vec<HashMap<String, u64>> {
        let mut any: HashMap<String, u64> = HashMap::new();
        let mut specific: BTreeMap<&Selector, HashMap<String, u64>> = BTreeMap::new();
        for (pointer, count) in relevant {
            let Some(edges) = edge_cache.get(pointer) else {
                continue;
            };
            for (selector, child) in &edges.child {
                let target = if *selector == Selector::Any {
                    &mut any
                } else {
                    specific.entry(selector).or_default()
                };
                let slot = target.entry(child.clone()).or_insert(0);
                *slot = slot.saturating_add(*count);
            }
        }
        let mut states: Vec<HashMap<String, u64>> = specific
            .into_values()
            .map(|mut named| {
                for (child, count) in &any {
                    let slot = named.entry(child.clone()).or_insert(0);
                    *slot = slot.saturating_add(*count);
                }
                named
            })
            .collect();
        if !any.is_empty() {
            states.push(any);
        }
        states
    }

    /// Propagates `seeds` along same-instance edges (a DAG unless the schema recurses without
    /// progress) and returns how many walks reach each node.
    fn close_in_place(
        &self,
        seeds: &HashMap<String, u64>,
        edge_cache: &mut HashMap<String, Edges>,
    ) -> Result<HashMap<String, u64>, SchemaError> {
        // Collect the same-instance subgraph reachable from the seeds.
        let mut in_degree: HashMap<String, usize> = HashMap::new();
        let mut queue: VecDeque<String> = seeds.keys().cloned().collect();
        for seed in seeds.keys() {
            in_degree.entry(seed.clone()).or_insert(0);
        }
        let mut visited: std::collections::HashSet<String> = seeds.keys().cloned().collect();
        while let Some(pointer) = queue.pop_front() {
            if !edge_cache.contains_key(&pointer) {
                let edges = self.edges(&pointer)?;
                edge_cache.insert(pointer.clone(), edges);
            }
            let targets = edge_cache
                .get(&pointer)
                .map(|e| e.in_place.clone())
                .unwrap_or_default();
            for target in targets {
                *in_degree.entry(target.clone()).or_insert(0) += 1;
                if visited.insert(target.clone()) {
                    queue.push_back(target);
                }
            }
        }
        // Kahn's algorithm: whatever is left over sits on a cycle.
        let mut totals: HashMap<String, u64> = seeds.clone();
        let mut ready: VecDeque<String> = in_degree
            .iter()
            .filter(|(_, degree)| **degree == 0)
            .map(|(pointer, _)| pointer.clone())
            .collect();
        let mut processed = 0usize;
        while let Some(pointer) = ready.pop_front() {
            processed += 1;
            let count = totals.get(&pointer).copied().unwrap_or(0);
            let targets = edge_cache
                .get(&pointer)
                .map(|e| e.in_place.clone())
                .unwrap_or_default();
            for target in targets {
                let slot = totals.entry(target.clone()).or_insert(0);
                *slot = slot.saturating_add(count);
                if let Some(degree) = in_degree.get_mut(&target) {
                    *degree -= 1;
                    if *degree == 0 {
                        ready.push_back(target);
                    }
                }
            }
        }
        if processed < in_degree.len() {
            let on_cycle = in_degree
                .iter()
                .filter(|(_, degree)| **degree > 0)
                .map(|(pointer, _)| pointer.clone())
                .min()
                .unwrap_or_default();
            return Err(SchemaError::RecursionWithoutProgress {
                pointer: if on_cycle.is_empty() {
                    "#".to_owned()
                } else {
                    format!("#{on_cycle}")
                },
            });
        }
        Ok(totals)
    }
}

fn resource_key(url: &url::Url) -> String {
    let mut key = url.clone();
    key.set_fragment(None);
    key.to_string()
}

fn percent_decode(text: &str) -> Result<String, ()> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or(())?;
            let hex = std::str::from_utf8(hex).map_err(|_| ())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| ())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ())
}
