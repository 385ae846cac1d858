/* toolwatch.ingest._wire: the compiled OTLP trace scanner.
 *
 * One pass over the bytes of an ExportTraceServiceRequest that produces exactly what the
 * reference scanner (toolwatch.ingest.scan, on protobuf's own messages) produces: per
 * ResourceSpans the wanted resource attributes, per span its ids, name, kind, times, status
 * code (and an ERROR span's message, cut), wanted attributes (converted to Python values and
 * cut to max_value_bytes) and its relevant events. Only wanted values become Python objects; everything else is walked to
 * check it the way protobuf's parser does (wire format, UTF-8 of string fields, nesting).
 *
 * Contract: scan() returns the result the reference scanner would return, or None when the
 * body is anything but a plainly encoded, valid request -- corrupt or truncated wire data,
 * invalid UTF-8, groups, a known field with an unexpected wire type, a singular field that
 * protobuf would merge (a repeated AnyValue member, KeyValue key or value), nesting deeper
 * than MAX_DEPTH. The caller then runs the reference scanner, which gives protobuf's own
 * answer (a DecodeError, or the merged message). Every SDK's output takes the fast path.
 * Memory and exceptions: NULL with a Python exception only on MemoryError.
 *
 * SCHEMA below lists every field of every message (opentelemetry-proto 1.45: trace/v1,
 * common/v1, resource/v1). The Python side compares it with protobuf's descriptors at
 * import and uses this scanner only when they agree, so a newer opentelemetry-proto cannot
 * silently change what is checked.
 *
 * Wire format: https://protobuf.dev/programming-guides/encoding/
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "toolwatch.ingest._wire reads fixed64/double fields as little-endian"
#endif

#define MAX_DEPTH 100 /* message nesting, the request itself at 1: protobuf allows 100 below it */
#define MAX_VALUE_DEPTH 32   /* AnyValue nesting converted; deeper arrays/maps are None */
#define MIN_ITEM_BYTES 8     /* arrays and maps keep max_value_bytes / 8 items per level */

/* Results of the walking functions. */
#define OK 0
#define FALLBACK 1 /* not for this scanner: the reference scanner decides */
#define FAILED -1  /* a Python exception is set */
#define TRY(expr)                    \
    do {                             \
        int rc_ = (expr);            \
        if (rc_ != OK) return rc_;   \
    } while (0)

/* ---- the schema ------------------------------------------------------------------------ */

typedef enum { K_VARINT, K_FIXED64, K_FIXED32, K_BYTES, K_STRING, K_MESSAGE } Kind;

struct Message;
typedef struct {
    uint32_t number;
    Kind kind;
    const struct Message *message; /* K_MESSAGE only */
    const char *name;
} Field;

typedef struct Message {
    const char *name;
    const Field *fields;
    int count;
} Message;

static const Message AnyValue_, ArrayValue_, KeyValueList_, KeyValue_, EntityRef_, Resource_,
    Scope_, Event_, Link_, Status_, Span_, ScopeSpans_, ResourceSpans_, Request_;

#define FIELDS(name) static const Field name##fields[]
#define MESSAGE(var, full)                                                      \
    static const Message var = {full, var##fields,                              \
                                (int)(sizeof(var##fields) / sizeof(Field))}

FIELDS(AnyValue_) = {
    {1, K_STRING, NULL, "string_value"},   {2, K_VARINT, NULL, "bool_value"},
    {3, K_VARINT, NULL, "int_value"},      {4, K_FIXED64, NULL, "double_value"},
    {5, K_MESSAGE, &ArrayValue_, "array_value"}, {6, K_MESSAGE, &KeyValueList_, "kvlist_value"},
    {7, K_BYTES, NULL, "bytes_value"},     {8, K_VARINT, NULL, "string_value_strindex"},
};
MESSAGE(AnyValue_, "opentelemetry.proto.common.v1.AnyValue");
FIELDS(ArrayValue_) = {{1, K_MESSAGE, &AnyValue_, "values"}};
MESSAGE(ArrayValue_, "opentelemetry.proto.common.v1.ArrayValue");
FIELDS(KeyValueList_) = {{1, K_MESSAGE, &KeyValue_, "values"}};
MESSAGE(KeyValueList_, "opentelemetry.proto.common.v1.KeyValueList");
FIELDS(KeyValue_) = {
    {1, K_STRING, NULL, "key"},
    {2, K_MESSAGE, &AnyValue_, "value"},
    {3, K_VARINT, NULL, "key_strindex"},
};
MESSAGE(KeyValue_, "opentelemetry.proto.common.v1.KeyValue");
FIELDS(EntityRef_) = {
    {1, K_STRING, NULL, "schema_url"},
    {2, K_STRING, NULL, "type"},
    {3, K_STRING, NULL, "id_keys"},
    {4, K_STRING, NULL, "description_keys"},
};
MESSAGE(EntityRef_, "opentelemetry.proto.common.v1.EntityRef");
FIELDS(Resource_) = {
    {1, K_MESSAGE, &KeyValue_, "attributes"},
    {2, K_VARINT, NULL, "dropped_attributes_count"},
    {3, K_MESSAGE, &EntityRef_, "entity_refs"},
};
MESSAGE(Resource_, "opentelemetry.proto.resource.v1.Resource");
FIELDS(Scope_) = {
    {1, K_STRING, NULL, "name"},
    {2, K_STRING, NULL, "version"},
    {3, K_MESSAGE, &KeyValue_, "attributes"},
    {4, K_VARINT, NULL, "dropped_attributes_count"},
};
MESSAGE(Scope_, "opentelemetry.proto.common.v1.InstrumentationScope");
FIELDS(Event_) = {
    {1, K_FIXED64, NULL, "time_unix_nano"},
    {2, K_STRING, NULL, "name"},
    {3, K_MESSAGE, &KeyValue_, "attributes"},
    {4, K_VARINT, NULL, "dropped_attributes_count"},
};
MESSAGE(Event_, "opentelemetry.proto.trace.v1.Span.Event");
FIELDS(Link_) = {
    {1, K_BYTES, NULL, "trace_id"},
    {2, K_BYTES, NULL, "span_id"},
    {3, K_STRING, NULL, "trace_state"},
    {4, K_MESSAGE, &KeyValue_, "attributes"},
    {5, K_VARINT, NULL, "dropped_attributes_count"},
    {6, K_FIXED32, NULL, "flags"},
};
MESSAGE(Link_, "opentelemetry.proto.trace.v1.Span.Link");
FIELDS(Status_) = {{2, K_STRING, NULL, "message"}, {3, K_VARINT, NULL, "code"}};
MESSAGE(Status_, "opentelemetry.proto.trace.v1.Status");
FIELDS(Span_) = {
    {1, K_BYTES, NULL, "trace_id"},
    {2, K_BYTES, NULL, "span_id"},
    {3, K_STRING, NULL, "trace_state"},
    {4, K_BYTES, NULL, "parent_span_id"},
    {5, K_STRING, NULL, "name"},
    {6, K_VARINT, NULL, "kind"},
    {7, K_FIXED64, NULL, "start_time_unix_nano"},
    {8, K_FIXED64, NULL, "end_time_unix_nano"},
    {9, K_MESSAGE, &KeyValue_, "attributes"},
    {10, K_VARINT, NULL, "dropped_attributes_count"},
    {11, K_MESSAGE, &Event_, "events"},
    {12, K_VARINT, NULL, "dropped_events_count"},
    {13, K_MESSAGE, &Link_, "links"},
    {14, K_VARINT, NULL, "dropped_links_count"},
    {15, K_MESSAGE, &Status_, "status"},
    {16, K_FIXED32, NULL, "flags"},
};
MESSAGE(Span_, "opentelemetry.proto.trace.v1.Span");
FIELDS(ScopeSpans_) = {
    {1, K_MESSAGE, &Scope_, "scope"},
    {2, K_MESSAGE, &Span_, "spans"},
    {3, K_STRING, NULL, "schema_url"},
};
MESSAGE(ScopeSpans_, "opentelemetry.proto.trace.v1.ScopeSpans");
FIELDS(ResourceSpans_) = {
    {1, K_MESSAGE, &Resource_, "resource"},
    {2, K_MESSAGE, &ScopeSpans_, "scope_spans"},
    {3, K_STRING, NULL, "schema_url"},
};
MESSAGE(ResourceSpans_, "opentelemetry.proto.trace.v1.ResourceSpans");
FIELDS(Request_) = {{1, K_MESSAGE, &ResourceSpans_, "resource_spans"}};
MESSAGE(Request_, "opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest");

static const Message *const ALL_MESSAGES[] = {
    &Request_, &ResourceSpans_, &Resource_, &EntityRef_, &ScopeSpans_, &Scope_, &Span_,
    &Event_,   &Link_,          &Status_,   &KeyValue_,  &AnyValue_,   &ArrayValue_,
    &KeyValueList_,
};

/* ---- wire primitives ------------------------------------------------------------------- */

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} Buf;

static const int WIRE_TYPE[] = {
    [K_VARINT] = 0, [K_FIXED64] = 1, [K_FIXED32] = 5,
    [K_BYTES] = 2,  [K_STRING] = 2,  [K_MESSAGE] = 2,
};

static int read_varint(Buf *b, uint64_t *out) {
    uint64_t value = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (b->p >= b->end) return FALLBACK;
        uint8_t byte = *b->p++;
        value |= (uint64_t)(byte & 0x7F) << shift; /* bits past 64 are dropped, as protobuf does */
        if (!(byte & 0x80)) {
            *out = value;
            return OK;
        }
    }
    return FALLBACK; /* longer than 10 bytes: corrupt */
}

/* A tag: field number and wire type. Tags longer than 5 bytes, field number 0 and numbers
 * past 2^29-1 are corrupt; groups (3, 4) and wire types 6, 7 are not for this scanner. */
static int read_tag(Buf *b, uint32_t *number, int *wire) {
    const uint8_t *start = b->p;
    uint64_t tag;
    TRY(read_varint(b, &tag));
    if (b->p - start > 5 || tag > UINT32_MAX) return FALLBACK;
    *number = (uint32_t)(tag >> 3);
    *wire = (int)(tag & 7);
    if (*number == 0 || *number > 536870911u) return FALLBACK;
    if (*wire != 0 && *wire != 1 && *wire != 2 && *wire != 5) return FALLBACK;
    return OK;
}

static int read_bytes(Buf *b, Buf *out) {
    uint64_t length;
    TRY(read_varint(b, &length));
    if (length > (uint64_t)(b->end - b->p)) return FALLBACK;
    out->p = b->p;
    out->end = b->p + length;
    b->p += length;
    return OK;
}

static int read_fixed64(Buf *b, uint64_t *out) {
    if (b->end - b->p < 8) return FALLBACK;
    memcpy(out, b->p, 8);
    b->p += 8;
    return OK;
}

static int read_fixed32(Buf *b, uint32_t *out) {
    if (b->end - b->p < 4) return FALLBACK;
    memcpy(out, b->p, 4); /* little-endian, as the wire format and every supported target */
    b->p += 4;
    return OK;
}

static int skip(Buf *b, int wire) {
    uint64_t ignored;
    Buf body;
    switch (wire) {
    case 0: return read_varint(b, &ignored);
    case 1: return read_fixed64(b, &ignored);
    case 2: return read_bytes(b, &body);
    case 5:
        if (b->end - b->p < 4) return FALLBACK;
        b->p += 4;
        return OK;
    default: return FALLBACK;
    }
}

static const Field *find_field(const Message *m, uint32_t number) {
    for (int i = 0; i < m->count; i++)
        if (m->fields[i].number == number) return &m->fields[i];
    return NULL;
}

/* Valid UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF). */
static int utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c == 0xE0) { need = 2; lo = 0xA0; }
        else if (c >= 0xE1 && c <= 0xEC) need = 2;
        else if (c == 0xED) { need = 2; hi = 0x9F; }
        else if (c >= 0xEE && c <= 0xEF) need = 2;
        else if (c == 0xF0) { need = 3; lo = 0x90; }
        else if (c >= 0xF1 && c <= 0xF3) need = 3;
        else if (c == 0xF4) { need = 3; hi = 0x8F; }
        else return 0;
        if (n - i <= need) return 0;
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (size_t k = 2; k <= need; k++)
            if ((s[i + k] & 0xC0) != 0x80) return 0;
        i += need + 1;
    }
    return 1;
}

/* Check a message the way protobuf's parser would, building nothing. */
static int validate(Buf b, const Message *m, int depth) {
    if (depth > MAX_DEPTH) return FALLBACK;
    while (b.p < b.end) {
        uint32_t number;
        int wire;
        TRY(read_tag(&b, &number, &wire));
        const Field *f = find_field(m, number);
        if (f == NULL) {
            TRY(skip(&b, wire));
            continue;
        }
        if (wire != WIRE_TYPE[f->kind]) return FALLBACK;
        Buf body;
        switch (f->kind) {
        case K_STRING:
            TRY(read_bytes(&b, &body));
            if (!utf8_valid(body.p, (size_t)(body.end - body.p))) return FALLBACK;
            break;
        case K_MESSAGE:
            TRY(read_bytes(&b, &body));
            TRY(validate(body, f->message, depth + 1));
            break;
        default: TRY(skip(&b, wire)); break;
        }
    }
    return OK;
}

/* ---- the plan: what to keep ------------------------------------------------------------ */

/* A set of keys (UTF-8 bytes -> the interned Python str), open addressing. */
typedef struct {
    const char *bytes;
    Py_ssize_t length;
    PyObject *str; /* borrowed from KeySet.owner */
} Slot;

typedef struct {
    Slot *slots;
    size_t mask;
    PyObject *owner; /* a tuple holding every str */
} KeySet;

static uint64_t fnv1a(const uint8_t *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

static int keyset_init(KeySet *set, PyObject *iterable) {
    PyObject *given = PySequence_Tuple(iterable);
    if (given == NULL) return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(given);
    set->owner = PyTuple_New(n);
    size_t size = 8;
    while (size < (size_t)n * 2) size <<= 1;
    set->slots = PyMem_Calloc(size, sizeof(Slot));
    if (set->owner == NULL || set->slots == NULL) {
        Py_DECREF(given);
        if (set->slots == NULL) PyErr_NoMemory();
        return -1;
    }
    set->mask = size - 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyTuple_GET_ITEM(given, i);
        if (!PyUnicode_CheckExact(key)) {
            PyErr_Format(PyExc_TypeError, "keys must be str, got %R", key);
            Py_DECREF(given);
            return -1;
        }
        Py_INCREF(key);
        PyUnicode_InternInPlace(&key); /* dict lookups of interned keys compare by identity */
        PyTuple_SET_ITEM(set->owner, i, key);
        Py_ssize_t length;
        const char *bytes = PyUnicode_AsUTF8AndSize(key, &length);
        if (bytes == NULL) {
            Py_DECREF(given);
            return -1;
        }
        size_t at = fnv1a((const uint8_t *)bytes, (size_t)length) & set->mask;
        while (set->slots[at].bytes != NULL) at = (at + 1) & set->mask;
        set->slots[at] = (Slot){bytes, length, key};
    }
    Py_DECREF(given);
    return 0;
}

static PyObject *keyset_get(const KeySet *set, const uint8_t *s, size_t n) {
    size_t at = fnv1a(s, n) & set->mask;
    while (set->slots[at].bytes != NULL) {
        const Slot *slot = &set->slots[at];
        if ((size_t)slot->length == n && memcmp(slot->bytes, s, n) == 0) return slot->str;
        at = (at + 1) & set->mask;
    }
    return NULL;
}

static void keyset_clear(KeySet *set) {
    PyMem_Free(set->slots);
    set->slots = NULL;
    Py_CLEAR(set->owner);
}

/* Short ASCII strings made lately: span names, models, tool names, finish reasons are a few
 * values repeated over every span, so the spans share one object of each instead of holding
 * their own. That is fewer objects held while traces wait for completion, and fewer to free
 * when they are emitted: the server's cost there is memory gone cold, not instructions (see
 * docs/performance.md). Direct-mapped by FNV-1a of the bytes; a miss takes the slot, so a
 * value seen once (an id) costs a hash and a compare. JSON documents (arguments, results)
 * belong to one call and are left out. Only ASCII strings are kept, so a kept object's
 * one-byte data is its UTF-8. */
#define RECENT_SLOTS 512 /* a power of two */
#define RECENT_MAX_BYTES 48

typedef struct {
    PyObject *slot[RECENT_SLOTS];
} Recent;

typedef struct {
    PyObject_HEAD
    KeySet span_keys;
    KeySet resource_keys;
    KeySet event_names;
    KeySet event_keys;
    PyObject *prefixes; /* tuple of bytes */
    Py_ssize_t limit;   /* max_value_bytes */
    Py_ssize_t cap;     /* max_span_attributes */
    Recent *recent;     /* owned; scans run one at a time, under the GIL */
} Plan;

/* The str of the n UTF-8 bytes at s (checked valid by the caller, or checked here: NULL with
 * UnicodeDecodeError set), the one made lately for the same bytes when there is one. */
static PyObject *recent_str(Recent *recent, const uint8_t *s, size_t n) {
    if (n == 0 || n > RECENT_MAX_BYTES || s[0] == '{' || s[0] == '[') /* JSON: per call */
        return PyUnicode_DecodeUTF8((const char *)s, (Py_ssize_t)n, NULL);
    PyObject **slot = &recent->slot[fnv1a(s, n) & (RECENT_SLOTS - 1)];
    PyObject *kept = *slot;
    if (kept != NULL && (size_t)PyUnicode_GET_LENGTH(kept) == n
        && memcmp(PyUnicode_1BYTE_DATA(kept), s, n) == 0)
        return Py_NewRef(kept);
    PyObject *str = PyUnicode_DecodeUTF8((const char *)s, (Py_ssize_t)n, NULL);
    if (str != NULL && PyUnicode_IS_ASCII(str)) Py_XSETREF(*slot, Py_NewRef(str));
    return str;
}

static void recent_clear(Recent *recent) {
    if (recent == NULL) return;
    for (size_t i = 0; i < RECENT_SLOTS; i++) Py_CLEAR(recent->slot[i]);
    PyMem_Free(recent);
}

/* Which attributes one walk keeps: at most `cap` keys; a wanted one with a new key beyond them
 * is counted in `over` and dropped (a repeated key still takes its last value). */
typedef struct {
    const KeySet *keys;
    PyObject *prefixes; /* tuple of bytes, or NULL */
    Py_ssize_t cap;
    Py_ssize_t over;
} Filter;

/* ---- AnyValue -> Python ---------------------------------------------------------------- */

/* A string field's value, cut to `limit` UTF-8 bytes on a character boundary. The whole
 * value is checked first: protobuf rejects invalid UTF-8 anywhere in it. */
static int make_str(Buf s, Py_ssize_t limit, Recent *recent, PyObject **out) {
    size_t n = (size_t)(s.end - s.p);
    if (n > (size_t)limit) {
        if (!utf8_valid(s.p, n)) return FALLBACK;
        n = (size_t)limit;
        while (n > 0 && (s.p[n] & 0xC0) == 0x80) n--; /* s.p[limit] exists: n < length */
    }
    PyObject *str = recent != NULL
        ? recent_str(recent, s.p, n)
        : PyUnicode_DecodeUTF8((const char *)s.p, (Py_ssize_t)n, NULL);
    if (str == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return FAILED;
        PyErr_Clear();
        return FALLBACK;
    }
    *out = str;
    return OK;
}

static int make_hex(Buf s, Py_ssize_t limit, PyObject **out) {
    static const char digits[] = "0123456789abcdef";
    size_t n = (size_t)(s.end - s.p);
    size_t chars = n * 2 < (size_t)limit ? n * 2 : (size_t)limit;
    PyObject *str = PyUnicode_New((Py_ssize_t)chars, 127);
    if (str == NULL) return FAILED;
    Py_UCS1 *data = PyUnicode_1BYTE_DATA(str);
    for (size_t i = 0; i < chars; i++) {
        uint8_t byte = s.p[i / 2];
        data[i] = (Py_UCS1)digits[i % 2 ? byte & 0x0F : byte >> 4];
    }
    *out = str;
    return OK;
}

/* The one field an AnyValue carries (its oneof), or FALLBACK when it carries two. */
typedef struct {
    uint32_t number; /* 0: unset */
    uint64_t scalar;
    Buf body;
} Member;

static int any_member(Buf b, int depth, Member *member) {
    if (depth > MAX_DEPTH) return FALLBACK;
    member->number = 0;
    while (b.p < b.end) {
        uint32_t number;
        int wire;
        TRY(read_tag(&b, &number, &wire));
        const Field *f = find_field(&AnyValue_, number);
        if (f == NULL) {
            TRY(skip(&b, wire));
            continue;
        }
        if (wire != WIRE_TYPE[f->kind] || member->number != 0) return FALLBACK;
        member->number = number;
        if (wire == 0) TRY(read_varint(&b, &member->scalar));
        else if (wire == 1) TRY(read_fixed64(&b, &member->scalar));
        else TRY(read_bytes(&b, &member->body));
    }
    return OK;
}

static int convert(Buf b, const Plan *plan, int depth, int level, PyObject **out);

/* The items (field 1) of an ArrayValue as a list; the first `keep` converted, the rest checked. */
static int convert_array(Buf b, const Plan *plan, int depth, int level, PyObject **out) {
    PyObject *list = PyList_New(0);
    if (list == NULL) return FAILED;
    Py_ssize_t keep = plan->limit / MIN_ITEM_BYTES;
    int rc = OK;
    while (rc == OK && b.p < b.end) {
        uint32_t number;
        int wire;
        Buf item;
        if ((rc = read_tag(&b, &number, &wire)) != OK) break;
        if (number != 1) {
            rc = skip(&b, wire);
            continue;
        }
        if (wire != 2 || (rc = read_bytes(&b, &item)) != OK) {
            rc = rc == OK ? FALLBACK : rc;
            break;
        }
        if (PyList_GET_SIZE(list) >= keep) {
            rc = validate(item, &AnyValue_, depth + 1);
            continue;
        }
        PyObject *value;
        if ((rc = convert(item, plan, depth + 1, level + 1, &value)) != OK) break;
        rc = PyList_Append(list, value) == 0 ? OK : FAILED;
        Py_DECREF(value);
    }
    if (rc != OK) {
        Py_DECREF(list);
        return rc;
    }
    *out = list;
    return OK;
}

static int keyvalue_parts(Buf b, int depth, Buf *key, Buf *value, int *has_value);

/* The pairs (field 1) of a KeyValueList as a dict; the first `keep` converted (a repeated key
 * keeps its first place and its last value, as a dict display does), the rest checked. */
static int convert_kvlist(Buf b, const Plan *plan, int depth, int level, PyObject **out) {
    PyObject *dict = PyDict_New();
    if (dict == NULL) return FAILED;
    Py_ssize_t keep = plan->limit / MIN_ITEM_BYTES, seen = 0;
    int rc = OK;
    while (rc == OK && b.p < b.end) {
        uint32_t number;
        int wire, has_value;
        Buf pair, key, value;
        if ((rc = read_tag(&b, &number, &wire)) != OK) break;
        if (number != 1) {
            rc = skip(&b, wire);
            continue;
        }
        if (wire != 2 || (rc = read_bytes(&b, &pair)) != OK) {
            rc = rc == OK ? FALLBACK : rc;
            break;
        }
        if (seen++ >= keep) {
            rc = validate(pair, &KeyValue_, depth + 1);
            continue;
        }
        if ((rc = keyvalue_parts(pair, depth + 1, &key, &value, &has_value)) != OK) break;
        PyObject *name = NULL, *item = NULL;
        /* An unset value is AnyValue's default: no member, converted to None. */
        if ((rc = make_str(key, PY_SSIZE_T_MAX, NULL, &name)) != OK) break;
        if (has_value) rc = convert(value, plan, depth + 2, level + 1, &item);
        else item = Py_NewRef(Py_None);
        if (rc == OK) rc = PyDict_SetItem(dict, name, item) == 0 ? OK : FAILED;
        Py_XDECREF(name);
        Py_XDECREF(item);
    }
    if (rc != OK) {
        Py_DECREF(dict);
        return rc;
    }
    *out = dict;
    return OK;
}

/* An AnyValue as Python (str, bool, int, float, hex str, list, dict or None). `level` is the
 * value nesting (0 for an attribute's own value). */
static int convert(Buf b, const Plan *plan, int depth, int level, PyObject **out) {
    Member m;
    TRY(any_member(b, depth, &m));
    switch (m.number) {
    case 1: return make_str(m.body, plan->limit, plan->recent, out);
    case 2: *out = PyBool_FromLong(m.scalar != 0); return OK;
    case 3: *out = PyLong_FromLongLong((long long)(int64_t)m.scalar); break;
    case 4: {
        double d;
        memcpy(&d, &m.scalar, sizeof d);
        *out = PyFloat_FromDouble(d);
        break;
    }
    case 7: return make_hex(m.body, plan->limit, out);
    case 5:
    case 6:
        if (level >= MAX_VALUE_DEPTH) {
            TRY(validate(m.body, m.number == 5 ? &ArrayValue_ : &KeyValueList_, depth + 1));
            *out = Py_NewRef(Py_None);
            return OK;
        }
        if (m.number == 5) return convert_array(m.body, plan, depth + 1, level, out);
        return convert_kvlist(m.body, plan, depth + 1, level, out);
    default: *out = Py_NewRef(Py_None); return OK; /* unset, or a string_value_strindex */
    }
    return *out == NULL ? FAILED : OK;
}

/* ---- KeyValue ---------------------------------------------------------------------------- */

/* The key and value of a KeyValue, checked; FALLBACK when either appears twice. */
static int keyvalue_parts(Buf b, int depth, Buf *key, Buf *value, int *has_value) {
    if (depth > MAX_DEPTH) return FALLBACK;
    int keys = 0;
    *has_value = 0;
    key->p = key->end = b.p;
    while (b.p < b.end) {
        uint32_t number;
        int wire;
        TRY(read_tag(&b, &number, &wire));
        if (number == 1 || number == 2) {
            if (wire != 2) return FALLBACK;
            if ((number == 1 ? keys++ : (*has_value)++) > 0) return FALLBACK;
            TRY(read_bytes(&b, number == 1 ? key : value));
        } else if (number == 3) {
            if (wire != 0) return FALLBACK;
            TRY(skip(&b, wire));
        } else {
            TRY(skip(&b, wire));
        }
    }
    if (!utf8_valid(key->p, (size_t)(key->end - key->p))) return FALLBACK;
    return OK;
}

static int has_prefix(PyObject *prefixes, Buf key) {
    if (prefixes == NULL) return 0;
    size_t n = (size_t)(key.end - key.p);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(prefixes); i++) {
        PyObject *prefix = PyTuple_GET_ITEM(prefixes, i);
        size_t length = (size_t)PyBytes_GET_SIZE(prefix);
        if (n >= length && memcmp(key.p, PyBytes_AS_STRING(prefix), length) == 0) return 1;
    }
    return 0;
}

/* One attribute: into `attrs` when the filter wants its key and its value converts to something
 * other than None, unless it is a new key and `attrs` holds the filter's cap already (then it
 * is counted in its `over`); else only checked. */
static int attribute(Buf b, const Plan *plan, Filter *filter, int depth, PyObject *attrs) {
    Buf key, value;
    int has_value;
    TRY(keyvalue_parts(b, depth, &key, &value, &has_value));
    size_t n = (size_t)(key.end - key.p);
    PyObject *name = keyset_get(filter->keys, key.p, n);
    int wanted = name != NULL || has_prefix(filter->prefixes, key);
    if (!wanted) return has_value ? validate(value, &AnyValue_, depth + 1) : OK;
    if (!has_value) return OK; /* an unset value converts to None, which is not kept */
    PyObject *converted;
    TRY(convert(value, plan, depth + 1, 0, &converted));
    if (converted == Py_None) {
        Py_DECREF(converted);
        return OK;
    }
    if (name == NULL) {
        name = PyUnicode_DecodeUTF8((const char *)key.p, (Py_ssize_t)n, NULL); /* checked */
        if (name == NULL) {
            Py_DECREF(converted);
            return FAILED;
        }
    } else {
        Py_INCREF(name);
    }
    int rc = OK, keep = 1;
    if (PyDict_GET_SIZE(attrs) >= filter->cap) { /* full: only a key it holds is set again */
        int present = PyDict_Contains(attrs, name);
        rc = present < 0 ? FAILED : OK;
        keep = present > 0;
        filter->over += present == 0;
    }
    if (rc == OK && keep) rc = PyDict_SetItem(attrs, name, converted) == 0 ? OK : FAILED;
    Py_DECREF(name);
    Py_DECREF(converted);
    return rc;
}

/* ---- spans --------------------------------------------------------------------------------- */

static PyObject *bytes_of(Buf b) {
    return PyBytes_FromStringAndSize((const char *)b.p, b.end - b.p);
}

/* Where the trace id sits in a span tuple (see span()). */
#define SPAN_TRACE_ID 3

/* The span's trace id: the previous span's bytes object when it holds the same id (spans of
 * one trace sit together in a request), else a new one. Sharing it saves an object per span,
 * and the buffer's dict lookups by trace id then match by identity instead of comparing
 * bytes (`make bench-instructions`, stage assemble). */
static PyObject *trace_id_of(Buf b, PyObject *spans) {
    Py_ssize_t n = PyList_GET_SIZE(spans), size = b.end - b.p;
    if (n > 0) {
        PyObject *previous = PyTuple_GET_ITEM(PyList_GET_ITEM(spans, n - 1), SPAN_TRACE_ID);
        if (PyBytes_GET_SIZE(previous) == size
            && memcmp(PyBytes_AS_STRING(previous), b.p, (size_t)size) == 0)
            return Py_NewRef(previous);
    }
    return bytes_of(b);
}

/* Where the span and parent ids sit in a span tuple. */
#define SPAN_SPAN_ID 4
#define SPAN_PARENT_ID 5

/* The span's parent id: the previous span's parent bytes when they are the same (siblings sit
 * together in a request), or the previous span's own id when that is the parent, else a new
 * object. An object less per span for most spans, held while their trace waits. */
static PyObject *parent_id_of(Buf b, PyObject *spans) {
    Py_ssize_t n = PyList_GET_SIZE(spans), size = b.end - b.p;
    if (n > 0 && size > 0) {
        PyObject *previous = PyList_GET_ITEM(spans, n - 1);
        for (int i = 0; i < 2; i++) {
            PyObject *id = PyTuple_GET_ITEM(previous, i == 0 ? SPAN_PARENT_ID : SPAN_SPAN_ID);
            if (PyBytes_GET_SIZE(id) == size
                && memcmp(PyBytes_AS_STRING(id), b.p, (size_t)size) == 0)
                return Py_NewRef(id);
        }
    }
    return bytes_of(b);
}

/* A tuple of the n new references in items, which it steals; NULL, with the exception set,
 * when one of them is NULL (its constructor failed) or the tuple cannot be made, and then
 * none is leaked. Py_BuildValue, which parses a format string for every span, took 2.7 times
 * the instructions (`make bench-instructions`: 1,170 of the scan's 17,330 per span). */
static PyObject *tuple_stealing(PyObject **items, Py_ssize_t n) {
    PyObject *tuple = PyTuple_New(n);
    int complete = tuple != NULL;
    for (Py_ssize_t i = 0; i < n; i++) complete = complete && items[i] != NULL;
    if (!complete) {
        for (Py_ssize_t i = 0; i < n; i++) Py_XDECREF(items[i]);
        Py_XDECREF(tuple);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(tuple, i, items[i]);
    return tuple;
}

/* A relevant event as (name, attrs); *out stays NULL for an event nobody reads. */
static int event(Buf b, const Plan *plan, int depth, PyObject **out) {
    *out = NULL;
    TRY(validate(b, &Event_, depth));
    Buf scan = b, name = {b.p, b.p};
    while (scan.p < scan.end) { /* the last name wins, wherever it stands */
        uint32_t number;
        int wire;
        Buf body;
        TRY(read_tag(&scan, &number, &wire));
        if (number == 2) {
            TRY(read_bytes(&scan, &body));
            name = body;
        } else {
            TRY(skip(&scan, wire));
        }
    }
    PyObject *key = keyset_get(&plan->event_names, name.p, (size_t)(name.end - name.p));
    if (key == NULL) return OK;
    PyObject *attrs = PyDict_New();
    if (attrs == NULL) return FAILED;
    Filter filter = {&plan->event_keys, NULL, PY_SSIZE_T_MAX, 0}; /* a few exact keys */
    int rc = OK;
    while (rc == OK && b.p < b.end) {
        uint32_t number;
        int wire;
        Buf body;
        if ((rc = read_tag(&b, &number, &wire)) != OK) break;
        if (number != 3) {
            rc = skip(&b, wire);
            continue;
        }
        if ((rc = read_bytes(&b, &body)) == OK)
            rc = attribute(body, plan, &filter, depth + 1, attrs);
    }
    if (rc == OK) {
        PyObject *items[] = {Py_NewRef(key), attrs};
        *out = tuple_stealing(items, 2);
        return *out == NULL ? FAILED : OK;
    }
    Py_DECREF(attrs);
    return rc;
}

typedef struct {
    Buf trace_id, span_id, parent, name, message; /* message: the status's */
    uint64_t kind, start, end, status;
    uint32_t flags;
    PyObject *attrs;  /* dict */
    PyObject *events; /* list, or NULL while the span has none */
    Filter filter;    /* the span attributes kept, and how many were wanted beyond the cap */
} SpanParts;

static int status_fields(Buf b, int depth, uint64_t *code, Buf *message) {
    TRY(validate(b, &Status_, depth)); /* the wire types and the message's UTF-8 checked */
    while (b.p < b.end) {
        uint32_t number;
        int wire;
        TRY(read_tag(&b, &number, &wire));
        if (number == 3) TRY(read_varint(&b, code)); /* merged: the last one wins */
        else if (number == 2) TRY(read_bytes(&b, message));
        else TRY(skip(&b, wire));
    }
    return OK;
}

/* An ERROR span's status message, its first MAX_STATUS_MESSAGE bytes cut before a
 * character's start (scan.status_message, the reference); None for another status or an
 * empty message. */
#define STATUS_ERROR 2
#define MAX_STATUS_MESSAGE 512
static PyObject *status_message(const SpanParts *s) {
    size_t n = (size_t)(s->message.end - s->message.p);
    if ((int32_t)s->status != STATUS_ERROR || n == 0) Py_RETURN_NONE;
    if (n > MAX_STATUS_MESSAGE) {
        n = MAX_STATUS_MESSAGE;
        while (n > 0 && (s->message.p[n] & 0xC0) == 0x80) n--; /* a continuation byte */
    }
    return PyUnicode_DecodeUTF8((const char *)s->message.p, (Py_ssize_t)n, NULL);
}

static int span_field(SpanParts *s, Buf *b, const Plan *plan, int depth, uint32_t number,
                      int wire) {
    Buf body;
    const Field *f = find_field(&Span_, number);
    if (f == NULL) return skip(b, wire);
    if (wire != WIRE_TYPE[f->kind]) return FALLBACK;
    switch (number) {
    case 1: return read_bytes(b, &s->trace_id);
    case 2: return read_bytes(b, &s->span_id);
    case 4: return read_bytes(b, &s->parent);
    case 5:
        TRY(read_bytes(b, &s->name));
        return utf8_valid(s->name.p, (size_t)(s->name.end - s->name.p)) ? OK : FALLBACK;
    case 6: return read_varint(b, &s->kind);
    case 7: return read_fixed64(b, &s->start);
    case 8: return read_fixed64(b, &s->end);
    case 9:
        TRY(read_bytes(b, &body));
        return attribute(body, plan, &s->filter, depth + 1, s->attrs);
    case 11: {
        PyObject *found;
        TRY(read_bytes(b, &body));
        if (s->events == NULL && (s->events = PyList_New(0)) == NULL) return FAILED;
        TRY(event(body, plan, depth + 1, &found));
        if (found == NULL) return OK;
        int rc = PyList_Append(s->events, found) == 0 ? OK : FAILED;
        Py_DECREF(found);
        return rc;
    }
    case 15:
        TRY(read_bytes(b, &body));
        return status_fields(body, depth + 1, &s->status, &s->message);
    case 16: return read_fixed32(b, &s->flags);
    default:
        if (f->kind == K_STRING) {
            TRY(read_bytes(b, &body));
            return utf8_valid(body.p, (size_t)(body.end - body.p)) ? OK : FALLBACK;
        }
        if (f->kind == K_MESSAGE) {
            TRY(read_bytes(b, &body));
            return validate(body, f->message, depth + 1);
        }
        return skip(b, wire);
    }
}


/* SpanFlags (trace.proto): whether the parent's remoteness is known, and whether it is remote. */
#define HAS_IS_REMOTE 0x100u
#define IS_REMOTE 0x200u

/* The span tuple: (resource, scope, position, trace_id, span_id, parent_span_id, name, kind,
 * start, end, status_code, attributes, attributes_over, events, parent_local,
 * status_message). */
static int span(Buf b, const Plan *plan, int depth, Py_ssize_t resource, Py_ssize_t scope,
                Py_ssize_t position, PyObject *spans) {
    if (depth > MAX_DEPTH) return FALLBACK;
    SpanParts s;
    memset(&s, 0, sizeof s);
    s.trace_id.p = s.trace_id.end = s.span_id.p = s.span_id.end = b.p;
    s.parent.p = s.parent.end = s.name.p = s.name.end = s.message.p = s.message.end = b.p;
    s.filter = (Filter){&plan->span_keys, plan->prefixes, plan->cap, 0};
    if ((s.attrs = PyDict_New()) == NULL) return FAILED;
    int rc = OK;
    while (rc == OK && b.p < b.end) {
        uint32_t number;
        int wire;
        if ((rc = read_tag(&b, &number, &wire)) == OK)
            rc = span_field(&s, &b, plan, depth, number, wire);
    }
    PyObject *name = NULL, *item = NULL;
    if (rc == OK) {
        name = recent_str(plan->recent, s.name.p, (size_t)(s.name.end - s.name.p));
        if (name == NULL) rc = FAILED; /* the bytes were checked: only memory can fail */
    }
    if (rc == OK) {
        PyObject *events = s.events != NULL ? s.events : Py_None;
        PyObject *items[] = {
            PyLong_FromSsize_t(resource),
            PyLong_FromSsize_t(scope),
            PyLong_FromSsize_t(position),
            trace_id_of(s.trace_id, spans),
            bytes_of(s.span_id),
            parent_id_of(s.parent, spans),
            Py_NewRef(name),
            PyLong_FromLong((long)(int32_t)s.kind),
            PyLong_FromUnsignedLongLong((unsigned long long)s.start),
            PyLong_FromUnsignedLongLong((unsigned long long)s.end),
            PyLong_FromLong((long)(int32_t)s.status),
            Py_NewRef(s.attrs),
            PyLong_FromSsize_t(s.filter.over),
            Py_NewRef(events),
            PyBool_FromLong((s.flags & (HAS_IS_REMOTE | IS_REMOTE)) == HAS_IS_REMOTE),
            status_message(&s),
        };
        item = tuple_stealing(items, (Py_ssize_t)(sizeof items / sizeof items[0]));
        rc = item != NULL && PyList_Append(spans, item) == 0 ? OK : FAILED;
    }
    Py_XDECREF(item);
    Py_XDECREF(name);
    Py_DECREF(s.attrs);
    Py_XDECREF(s.events);
    return rc;
}

static int scope_spans(Buf b, const Plan *plan, int depth, Py_ssize_t resource, Py_ssize_t scope,
                       PyObject *spans) {
    if (depth > MAX_DEPTH) return FALLBACK;
    Py_ssize_t position = 0;
    while (b.p < b.end) {
        uint32_t number;
        int wire;
        Buf body;
        TRY(read_tag(&b, &number, &wire));
        const Field *f = find_field(&ScopeSpans_, number);
        if (f == NULL) {
            TRY(skip(&b, wire));
            continue;
        }
        if (wire != WIRE_TYPE[f->kind]) return FALLBACK;
        TRY(read_bytes(&b, &body));
        if (number == 2) TRY(span(body, plan, depth + 1, resource, scope, position++, spans));
        else if (f->kind == K_MESSAGE) TRY(validate(body, f->message, depth + 1));
        else if (!utf8_valid(body.p, (size_t)(body.end - body.p))) return FALLBACK;
    }
    return OK;
}

/* Resource attributes (all occurrences of the field merge, as protobuf merges them). */
static int resource(Buf b, const Plan *plan, int depth, PyObject *attrs) {
    if (depth > MAX_DEPTH) return FALLBACK;
    Filter filter = {&plan->resource_keys, NULL, PY_SSIZE_T_MAX, 0}; /* a few exact keys */
    while (b.p < b.end) {
        uint32_t number;
        int wire;
        Buf body;
        TRY(read_tag(&b, &number, &wire));
        const Field *f = find_field(&Resource_, number);
        if (f == NULL) {
            TRY(skip(&b, wire));
            continue;
        }
        if (wire != WIRE_TYPE[f->kind]) return FALLBACK;
        if (number == 1) {
            TRY(read_bytes(&b, &body));
            TRY(attribute(body, plan, &filter, depth + 1, attrs));
        } else if (f->kind == K_MESSAGE) {
            TRY(read_bytes(&b, &body));
            TRY(validate(body, f->message, depth + 1));
        } else {
            TRY(skip(&b, wire));
        }
    }
    return OK;
}

static int resource_spans(Buf b, const Plan *plan, int depth, Py_ssize_t index,
                          PyObject *attrs, PyObject *spans) {
    Py_ssize_t scope = 0;
    while (b.p < b.end) {
        uint32_t number;
        int wire;
        Buf body;
        TRY(read_tag(&b, &number, &wire));
        const Field *f = find_field(&ResourceSpans_, number);
        if (f == NULL) {
            TRY(skip(&b, wire));
            continue;
        }
        if (wire != WIRE_TYPE[f->kind]) return FALLBACK;
        TRY(read_bytes(&b, &body));
        if (number == 1) TRY(resource(body, plan, depth + 1, attrs));
        else if (number == 2) TRY(scope_spans(body, plan, depth + 1, index, scope++, spans));
        else if (!utf8_valid(body.p, (size_t)(body.end - body.p))) return FALLBACK;
    }
    return OK;
}

static int request(Buf b, const Plan *plan, PyObject *resources, PyObject *spans) {
    while (b.p < b.end) {
        uint32_t number;
        int wire;
        Buf body;
        TRY(read_tag(&b, &number, &wire));
        if (number != 1) {
            TRY(skip(&b, wire));
            continue;
        }
        if (wire != 2) return FALLBACK;
        TRY(read_bytes(&b, &body));
        PyObject *attrs = PyDict_New();
        if (attrs == NULL) return FAILED;
        int rc = PyList_Append(resources, attrs) == 0 ? OK : FAILED;
        Py_DECREF(attrs);
        TRY(rc);
        TRY(resource_spans(body, plan, 2, PyList_GET_SIZE(resources) - 1, attrs, spans));
    }
    return OK;
}

/* ---- the census ----------------------------------------------------------------------------
 *
 * census(body): the ResourceSpans, ScopeSpans and Spans of a request, counted from their
 * framing alone, no object built (toolwatch.ingest.protobuf_pieces.entries, which this
 * mirrors): a request dense in them is decoded in pieces. Counts up to where the framing
 * breaks. Groups, which protobuf keeps as unknown fields, are skipped whole. */

static int census_skip(Buf *b, uint32_t number, int wire, int depth) {
    Buf body;
    switch (wire) {
    case 0: case 1: case 5: return skip(b, wire);
    case 2: return read_bytes(b, &body);
    case 3:
        if (depth >= MAX_DEPTH) return FALLBACK;
        while (b->p < b->end) { /* field number 0 too: upb skips it in a group */
            uint64_t tag;
            TRY(read_varint(b, &tag));
            if (tag > UINT32_MAX) return FALLBACK;
            if ((tag & 7) == 4) return (tag >> 3) == number ? OK : FALLBACK;
            TRY(census_skip(b, (uint32_t)(tag >> 3), (int)(tag & 7), depth + 1));
        }
        return FALLBACK;
    default: return FALLBACK;
    }
}

/* level 0: the request (its children: field 1), 1: a ResourceSpans (2), 2: a ScopeSpans (2,
 * the spans: counted, not entered). */
static int census_of(Buf b, int level, Py_ssize_t *count) {
    const uint32_t child = level == 0 ? 1 : 2;
    while (b.p < b.end) {
        uint64_t tag;
        TRY(read_varint(&b, &tag));
        uint32_t number = (uint32_t)(tag >> 3);
        int wire = (int)(tag & 7);
        if (number == 0 || tag > UINT32_MAX) return FALLBACK;
        if (wire != 2) {
            TRY(census_skip(&b, number, wire, 0));
            continue;
        }
        Buf body;
        TRY(read_bytes(&b, &body));
        if (number != child) continue;
        (*count)++;
        if (level < 2) TRY(census_of(body, level + 1, count));
    }
    return OK;
}

static PyObject *census(PyObject *module, PyObject *arg) {
    (void)module;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) != 0) return NULL;
    Buf b = {(const uint8_t *)view.buf, (const uint8_t *)view.buf + view.len};
    Py_ssize_t count = 0;
    (void)census_of(b, 0, &count); /* what was counted before the framing broke */
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(count);
}

/* ---- the sift ------------------------------------------------------------------------------
 *
 * sift(body): a request dense in resources, scopes and spans (toolwatch.ingest.decode_requests),
 * walked once and told apart for its _decode_sifted: the spans that need a record, in runs,
 * each a small request to scan; and the spans rejected without one, in runs
 * counted by reason (what their scan and decode would reject them for), with the trace ids they
 * hand on. No Python object is made for a span rejected here but its trace id, so a request of
 * a million spans of a few bytes costs what reading them costs. sift(body, consume) hands the
 * pieces to consume a batch at a time as it finds them (SIFT_BATCH), so that they are decoded
 * and let go as it goes, and lets other threads run as it walks (SIFT_YIELD_BYTES).
 *
 * Unlike the scanner, this is protobuf's judge, not a fast path beside it: judge() answers what
 * protobuf's parser answers for a message, at its place in the request -- it refuses corrupt
 * wire data, a string field that is not UTF-8, a message or group nested more than MAX_LEVEL
 * deep, an end-group tag that ends no group or another's; it keeps a known field sent with
 * another wire type as an unknown field, and a well-formed group. Probed against protobuf (upb);
 * the unit tests compare the two on every shape. */

#define MAX_LEVEL 100 /* protobuf: messages and groups at most 100 below the request */
#define CORRUPT 2
#define KEEP 4 /* a span to scan, among its rejection codes */

enum { R_TRACE, R_SPAN, R_PARENT, R_MALFORMED, REASONS };

static int judge_tag(Buf *b, uint32_t *number, int *wire) {
    const uint8_t *start = b->p;
    uint64_t tag;
    if (read_varint(b, &tag) != OK || b->p - start > 5 || tag > UINT32_MAX || (tag >> 3) == 0)
        return CORRUPT;
    *number = (uint32_t)(tag >> 3);
    *wire = (int)(tag & 7);
    return OK;
}

static int judge_group(Buf *b, uint32_t number, int level);

/* Past one field's value, as protobuf reads an unknown field (a group: at level + 1). */
static int judge_skip(Buf *b, uint32_t number, int wire, int level) {
    switch (wire) {
    case 0: case 1: case 2: case 5: return skip(b, wire) == OK ? OK : CORRUPT;
    case 3: return judge_group(b, number, level + 1);
    default: return CORRUPT; /* 4: an end-group tag outside a group; 6 and 7 do not exist */
    }
}

/* A group protobuf skips: like a message's fields, but field number 0 is read too (upb
 * refuses it in a message, not in a group it skips; probed, and found by the fuzzer). */
static int judge_group(Buf *b, uint32_t number, int level) {
    if (level > MAX_LEVEL) return CORRUPT;
    while (b->p < b->end) {
        const uint8_t *start = b->p;
        uint64_t tag;
        if (read_varint(b, &tag) != OK || b->p - start > 5 || tag > UINT32_MAX) return CORRUPT;
        uint32_t found = (uint32_t)(tag >> 3);
        int wire = (int)(tag & 7);
        if (wire == 4) return found == number ? OK : CORRUPT;
        if (judge_skip(b, found, wire, level) != OK) return CORRUPT;
    }
    return CORRUPT; /* no end tag */
}

/* OK when protobuf parses message m (NULL: every field unknown) at `level` below the request,
 * else CORRUPT. */
static int judge(Buf b, const Message *m, int level) {
    if (level > MAX_LEVEL) return CORRUPT;
    while (b.p < b.end) {
        uint32_t number = 0;
        int wire = 0;
        if (judge_tag(&b, &number, &wire) != OK) return CORRUPT;
        const Field *f = m != NULL ? find_field(m, number) : NULL;
        if (f == NULL || wire != WIRE_TYPE[f->kind] || (f->kind != K_STRING && f->kind != K_MESSAGE)) {
            if (judge_skip(&b, number, wire, level) != OK) return CORRUPT;
            continue;
        }
        Buf body;
        if (read_bytes(&b, &body) != OK) return CORRUPT;
        if (f->kind == K_STRING) {
            if (!utf8_valid(body.p, (size_t)(body.end - body.p))) return CORRUPT;
        } else if (judge(body, f->message, level + 1) != OK) {
            return CORRUPT;
        }
    }
    return OK;
}

/* The last length-delimited field `number` of a message protobuf parses (judged before). */
static Buf last_field(Buf b, uint32_t number) {
    Buf found = {b.p, b.p};
    while (b.p < b.end) {
        uint32_t n = 0;
        int wire = 0;
        Buf body;
        (void)judge_tag(&b, &n, &wire);
        if (n == number && wire == 2) {
            (void)read_bytes(&b, &body);
            found = body;
        } else {
            (void)judge_skip(&b, n, wire, 0);
        }
    }
    return found;
}

/* The trace id salvage reads from a span protobuf refuses (salvage._trace_id: the span's last
 * field 1, read as bytes, every other field unknown); empty when even that cannot be read. */
static Buf outline_trace_id(Buf b) {
    Buf empty = {b.p, b.p};
    return judge(b, NULL, 0) == OK ? last_field(b, 1) : empty;
}

static int all_zero(Buf b) {
    for (const uint8_t *p = b.p; p < b.end; p++)
        if (*p) return 0;
    return 1;
}

/* What decode._id_problem rejects a span protobuf parses for (R_*), or KEEP. */
static int id_code(Buf span) {
    Buf trace = last_field(span, 1), id = last_field(span, 2), parent = last_field(span, 4);
    if (trace.end - trace.p != 16 || all_zero(trace)) return R_TRACE;
    if (id.end - id.p != 8 || all_zero(id)) return R_SPAN;
    if (parent.end - parent.p != 0 && parent.end - parent.p != 8) return R_PARENT;
    return KEEP;
}

/* A growable byte string. */
typedef struct {
    uint8_t *data;
    size_t size, capacity;
} Bytes;

static int bytes_add(Bytes *out, const uint8_t *p, size_t n) {
    if (out->size + n > out->capacity) {
        size_t capacity = out->capacity ? out->capacity : 256;
        while (capacity < out->size + n) capacity *= 2;
        uint8_t *grown = PyMem_Realloc(out->data, capacity);
        if (grown == NULL) {
            PyErr_NoMemory();
            return FAILED;
        }
        out->data = grown;
        out->capacity = capacity;
    }
    if (n) memcpy(out->data + out->size, p, n);
    out->size += n;
    return OK;
}

/* A length-delimited field `number` holding `head` then `tail`. */
static int bytes_field(Bytes *out, uint32_t number, const Bytes *head, const Bytes *tail) {
    uint8_t prefix[11];
    size_t n = 0, length = head->size + (tail != NULL ? tail->size : 0);
    prefix[n++] = (uint8_t)(number << 3 | 2);
    do {
        prefix[n++] = (uint8_t)((length & 0x7F) | (length >= 0x80 ? 0x80 : 0));
        length >>= 7;
    } while (length);
    TRY(bytes_add(out, prefix, n));
    TRY(bytes_add(out, head->data, head->size));
    return tail != NULL ? bytes_add(out, tail->data, tail->size) : OK;
}

/* A ResourceSpans' or ScopeSpans' own fields: its resource or scope (field 1, length-delimited),
 * all of them, merged as protobuf merges them; and, given `all`, its others too (schema_url,
 * unknown fields), all but its children (field 2, length-delimited). A rejected run's piece
 * holds them all, so that salvage finds what protobuf refuses there (a schema_url that is not
 * UTF-8, groups too deep: sift_own) and names it as a whole decode does; nothing else reads
 * the others. */
static int own_fields(Buf b, int all, Bytes *out) {
    while (b.p < b.end) {
        const uint8_t *start = b.p;
        uint32_t number = 0;
        int wire = 0;
        (void)judge_tag(&b, &number, &wire); /* judged before */
        (void)judge_skip(&b, number, wire, 0);
        int head = wire == 2 && number == 1, child = wire == 2 && number == 2;
        if (head || (all && !child)) TRY(bytes_add(out, start, (size_t)(b.p - start)));
    }
    return OK;
}

/* The kinds of pieces, made once (module_exec): not a str per piece. */
static PyObject *KIND_RESOURCE, *KIND_SPANS, *KIND_REJECTED;

#define DETAILED_RUNS 3 /* the runs whose first spans decode names: the first offenders */
#define DETAILED_SPANS 3
#define PIECE_SPANS 1024 /* protobuf_pieces._PIECE_SPANS, _PIECE_BYTES */
#define PIECE_BYTES (256 * 1024)
/* Pieces handed to `consume` at a time: at most this many, or about PIECE_BYTES of requests.
 * A request alternating kept and rejected spans makes a piece of each span, about 350 bytes
 * for a few on the wire: all at once, they took 21 times the body (bench, 20 MiB). */
#define SIFT_BATCH 256
/* The sift lets other threads run after each this many bytes of the body walked: a 20 MiB
 * request of 2-byte spans is walked in about half a second, the server's event loop paused
 * all along while it held the GIL (docs/deployment.md, Memory). 256 KiB: about 10 ms of
 * walking. */
#define SIFT_YIELD_BYTES (256 * 1024)

typedef struct {
    PyObject *pieces;       /* the pieces not yet handed on (a list) */
    PyObject *consume;      /* called with each batch of pieces, or NULL: all returned */
    const uint8_t *yielded; /* where the walk last let other threads run */
    Py_ssize_t batched;     /* bytes of the requests of `pieces` */
    const char *error;      /* what is wrong, when the request cannot be decoded */
    Py_ssize_t r, s;        /* the resource and scope walked */
    Buf resource, scope;    /* their bytes */
    int resource_given;     /* its own fields were a "resource" piece */
    int detailed;           /* rejected runs given their first spans */
    int corrupt;            /* a span, resource or scope protobuf refuses was seen */
    Py_ssize_t malformed;   /* spans rejected for that */
    /* the run: of spans to scan (keep), or rejected */
    int keep;
    Py_ssize_t first, count;
    const uint8_t *start, *end; /* a run to scan: its spans' fields, consecutive */
    Py_ssize_t counts[REASONS];
    PyObject *traces;           /* a rejected run's trace ids handed on (a list), or NULL */
    Buf shown[DETAILED_SPANS];  /* a rejected run's first spans, fields whole */
} Sift;

/* request(resource's own fields [, ScopeSpans(scope's own fields + spans)]): with a scope, for
 * a rejected run, their fields all (own_fields). */
static PyObject *sift_request(const Sift *w, int with_scope, const Buf *spans, int n) {
    Bytes own = {0}, scope = {0}, resource = {0};
    PyObject *result = NULL;
    int rc = own_fields(w->resource, with_scope, &own);
    if (rc == OK && with_scope) {
        rc = own_fields(w->scope, 1, &scope);
        for (int i = 0; rc == OK && i < n; i++)
            rc = bytes_add(&scope, spans[i].p, (size_t)(spans[i].end - spans[i].p));
        Bytes nested = {0};
        if (rc == OK) rc = bytes_field(&nested, 2, &scope, NULL);
        if (rc == OK) rc = bytes_field(&resource, 1, &own, &nested);
        PyMem_Free(nested.data);
    } else if (rc == OK) {
        rc = bytes_field(&resource, 1, &own, NULL);
    }
    if (rc == OK)
        result = PyBytes_FromStringAndSize((const char *)resource.data, (Py_ssize_t)resource.size);
    PyMem_Free(own.data);
    PyMem_Free(scope.data);
    PyMem_Free(resource.data);
    return result;
}

/* Hand the pieces gathered on to w->consume, if given (a new list takes their place). */
static int sift_hand_on(Sift *w) {
    if (w->consume == NULL || PyList_GET_SIZE(w->pieces) == 0) return OK;
    PyObject *batch = w->pieces;
    w->batched = 0;
    if ((w->pieces = PyList_New(0)) == NULL) {
        Py_DECREF(batch);
        return FAILED;
    }
    PyObject *done = PyObject_CallOneArg(w->consume, batch);
    Py_DECREF(batch);
    if (done == NULL) return FAILED;
    Py_DECREF(done);
    return OK;
}

/* Add a piece (stealing data, counts and traces; NULL when their constructor failed, with
 * the exception set: then nothing else is made). */
static int sift_piece(Sift *w, PyObject *kind, Py_ssize_t s, Py_ssize_t p, PyObject *data,
                      Py_ssize_t count, PyObject *counts, PyObject *traces) {
    if (data == NULL || counts == NULL || traces == NULL) {
        Py_XDECREF(data);
        Py_XDECREF(counts);
        Py_XDECREF(traces);
        return FAILED;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(data);
    PyObject *items[] = {Py_NewRef(kind), Py_BuildValue("(nnn)", w->r, s, p), data,
                         PyLong_FromSsize_t(count), counts, traces};
    PyObject *piece = tuple_stealing(items, 6);
    if (piece == NULL) return FAILED;
    int rc = PyList_Append(w->pieces, piece) == 0 ? OK : FAILED;
    Py_DECREF(piece);
    w->batched += size;
    if (rc == OK && (PyList_GET_SIZE(w->pieces) >= SIFT_BATCH || w->batched >= PIECE_BYTES))
        rc = sift_hand_on(w);
    return rc;
}

/* Hand on the run walked so far, if any. */
static int sift_flush(Sift *w) {
    if (w->count == 0) return OK;
    Py_ssize_t count = w->count;
    w->count = 0;
    if (w->keep) {
        if (!w->resource_given) {
            w->resource_given = 1;
            TRY(sift_piece(w, KIND_RESOURCE, 0, 0, sift_request(w, 0, NULL, 0), 0, PyTuple_New(0),
                           PyTuple_New(0)));
        }
        Buf run = {w->start, w->end};
        Bytes spans = {0}, scope = {0}, resource = {0};
        int rc = bytes_add(&spans, run.p, (size_t)(run.end - run.p));
        if (rc == OK) rc = bytes_field(&scope, 2, &spans, NULL);
        if (rc == OK) rc = bytes_field(&resource, 1, &scope, NULL);
        PyObject *data = rc == OK ? PyBytes_FromStringAndSize((const char *)resource.data,
                                                              (Py_ssize_t)resource.size)
                                  : NULL;
        PyMem_Free(spans.data);
        PyMem_Free(scope.data);
        PyMem_Free(resource.data);
        return sift_piece(w, KIND_SPANS, w->s, w->first, data, count, PyTuple_New(0),
                          PyTuple_New(0));
    }
    PyObject *data;
    if (w->detailed < DETAILED_RUNS) {
        w->detailed++;
        int n = count < DETAILED_SPANS ? (int)count : DETAILED_SPANS;
        data = sift_request(w, 1, w->shown, n);
    } else {
        data = PyBytes_FromStringAndSize(NULL, 0);
    }
    PyObject *counts = Py_BuildValue("(nnnn)", w->counts[0], w->counts[1], w->counts[2],
                                     w->counts[3]);
    PyObject *traces = PyList_AsTuple(w->traces);
    Py_CLEAR(w->traces);
    memset(w->counts, 0, sizeof w->counts);
    return sift_piece(w, KIND_REJECTED, w->s, w->first, data, count, counts, traces);
}

/* Let other threads run if the walk, now at `at`, went SIFT_YIELD_BYTES since it last did.
 * Safe: no Python object is touched meanwhile, and the body's buffer is held (a bytearray
 * cannot be resized while exported). */
static void sift_yield(Sift *w, const uint8_t *at) {
    if (at - w->yielded < SIFT_YIELD_BYTES) return;
    w->yielded = at;
    Py_BEGIN_ALLOW_THREADS
    Py_END_ALLOW_THREADS
}

/* Add the span at `p` (its field whole, and its bytes) to the runs: code KEEP or R_*. */
static int sift_span(Sift *w, Py_ssize_t p, Buf field, Buf span, int code) {
    int keep = code == KEEP;
    sift_yield(w, field.end);
    if (w->count > 0 && (keep != w->keep
                         || (keep && (field.p != w->end || w->count >= PIECE_SPANS
                                      || w->end - w->start >= PIECE_BYTES))))
        TRY(sift_flush(w));
    if (w->count == 0) {
        w->keep = keep;
        w->first = p;
        w->start = field.p;
        if (!keep && (w->traces = PyList_New(0)) == NULL) return FAILED;
    }
    w->end = field.end;
    if (!keep) {
        if (w->count < DETAILED_SPANS) w->shown[w->count] = field;
        w->counts[code]++;
        w->malformed += code == R_MALFORMED;
        Buf trace = code == R_MALFORMED ? outline_trace_id(span) : last_field(span, 1);
        if (code != R_TRACE && trace.end - trace.p == 16 && !all_zero(trace)) {
            Py_ssize_t n = PyList_GET_SIZE(w->traces);
            PyObject *previous = n ? PyList_GET_ITEM(w->traces, n - 1) : NULL;
            PyObject *id = previous != NULL && memcmp(PyBytes_AS_STRING(previous), trace.p, 16) == 0
                               ? Py_NewRef(previous)
                               : bytes_of(trace);
            int rc = id != NULL && PyList_Append(w->traces, id) == 0 ? OK : FAILED;
            Py_XDECREF(id);
            TRY(rc);
        }
    }
    w->count++;
    return OK;
}

/* The own fields of a ResourceSpans or ScopeSpans at `level` (1, 2), its resource or scope
 * (field 1) a message `m`, judged as salvage judges them: CORRUPT where salvage cannot read
 * the container (its outline, parsed on its own, from level 0: wire data, or groups nested
 * past 100 levels from there); `*bad` (its spans are rejected), and w->corrupt (protobuf
 * refuses the request), where protobuf cannot parse them at their place: its resource or
 * scope, a schema_url that is not UTF-8, or groups too deep at this level but not from
 * level 0. */
static int sift_own(Sift *w, Buf b, const Message *m, int level, int *bad) {
    while (b.p < b.end) {
        uint32_t number = 0;
        int wire = 0;
        Buf body;
        if (judge_tag(&b, &number, &wire) != OK) return CORRUPT;
        if (wire == 2 && number <= 3) {
            if (read_bytes(&b, &body) != OK) return CORRUPT;
            if (number == 1 && judge(body, m, level + 1) != OK) *bad = w->corrupt = 1;
            else if (number == 3 && !utf8_valid(body.p, (size_t)(body.end - body.p)))
                *bad = w->corrupt = 1;
            continue;
        }
        Buf here = b;
        if (judge_skip(&b, number, wire, 0) != OK) return CORRUPT;
        if (wire == 3 && judge_skip(&here, number, wire, level) != OK) *bad = w->corrupt = 1;
    }
    return OK;
}

/* A ScopeSpans: its own fields judged, then its spans, each judged. `bad`: its resource's
 * own fields are corrupt (its spans are then rejected, as salvage rejects them, and as they
 * are when its own are). */
static int sift_scope(Sift *w, Buf b, int bad) {
    if (sift_own(w, b, &Scope_, 2, &bad) != OK) return CORRUPT;
    w->scope = b;
    Py_ssize_t p = 0;
    while (b.p < b.end) {
        const uint8_t *start = b.p;
        uint32_t number = 0;
        int wire = 0;
        Buf span;
        (void)judge_tag(&b, &number, &wire);
        if (number != 2 || wire != 2) {
            (void)judge_skip(&b, number, wire, 2);
            continue;
        }
        (void)read_bytes(&b, &span);
        int refused = judge(span, &Span_, 3) != OK;
        w->corrupt |= refused;
        int code = bad || refused ? R_MALFORMED : id_code(span);
        Buf field = {start, b.p};
        TRY(sift_span(w, p++, field, span, code));
    }
    /* A rejected run named nowhere goes on into the next scope: its place is not used. */
    return w->keep || w->detailed < DETAILED_RUNS ? sift_flush(w) : OK;
}

/* A ResourceSpans: its own fields judged, then its scopes. */
static int sift_resource(Sift *w, Buf b) {
    int bad = 0;
    if (sift_own(w, b, &Resource_, 1, &bad) != OK) return CORRUPT;
    w->resource = b;
    w->resource_given = 0;
    w->s = 0;
    while (b.p < b.end) {
        uint32_t number = 0;
        int wire = 0;
        Buf scope;
        (void)judge_tag(&b, &number, &wire);
        if (number != 2 || wire != 2) {
            (void)judge_skip(&b, number, wire, 1);
            continue;
        }
        (void)read_bytes(&b, &scope);
        sift_yield(w, scope.p);
        int rc = sift_scope(w, scope, bad);
        if (rc == CORRUPT) w->error = "a scope_spans' own fields";
        TRY(rc);
        w->s++;
    }
    return OK;
}

static PyObject *sift(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *arg, *consume = Py_None;
    if (!PyArg_ParseTuple(args, "O|O:sift", &arg, &consume)) return NULL;
    if (consume != Py_None && !PyCallable_Check(consume)) {
        PyErr_Format(PyExc_TypeError, "consume must be callable, got %R", consume);
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) != 0) return NULL;
    Buf b = {(const uint8_t *)view.buf, (const uint8_t *)view.buf + view.len};
    Sift w;
    memset(&w, 0, sizeof w);
    w.consume = consume == Py_None ? NULL : consume;
    w.yielded = b.p;
    int rc = (w.pieces = PyList_New(0)) != NULL ? OK : FAILED;
    while (rc == OK && b.p < b.end) {
        uint32_t number = 0;
        int wire = 0;
        Buf resource;
        if (judge_tag(&b, &number, &wire) != OK) {
            rc = CORRUPT;
        } else if (number != 1 || wire != 2) {
            rc = judge_skip(&b, number, wire, 0);
        } else if (read_bytes(&b, &resource) != OK) {
            rc = CORRUPT;
        } else {
            sift_yield(&w, resource.p);
            rc = sift_resource(&w, resource);
            if (rc == CORRUPT && w.error == NULL) w.error = "a resource_spans' own fields";
            if (rc == OK) w.r++;
        }
    }
    if (rc == OK) rc = sift_flush(&w);
    /* What protobuf refuses is in no span: salvage cannot keep the rest (its None). */
    int refused = rc == OK && w.corrupt && w.malformed == 0;
    if (rc == OK && !refused) rc = sift_hand_on(&w);
    Py_XDECREF(w.traces);
    PyBuffer_Release(&view);
    if (refused) {
        Py_DECREF(w.pieces);
        return PyUnicode_FromString("a resource or scope protobuf cannot parse holds no span");
    }
    if (rc == OK && w.consume != NULL) {
        Py_DECREF(w.pieces);
        Py_RETURN_NONE;
    }
    if (rc == OK) return w.pieces;
    Py_XDECREF(w.pieces);
    if (rc == FAILED) return NULL;
    if (w.error == NULL) return PyUnicode_FromString("the request's framing is corrupt");
    return PyUnicode_FromFormat("resource_spans[%zd]: %s are not valid", w.r, w.error);
}

static PyMethodDef module_methods[] = {
    {"census", census, METH_O,
     "census(body) -> int: the resources, scopes and spans of a request, from its framing"},
    {"sift", sift, METH_VARARGS,
     "sift(body, consume=None) -> list of pieces | None | str: a dense request told apart\n"
     "(see protobuf_pieces). Given consume, hands it the pieces a batch (a list) at a time\n"
     "as they are found, and returns None; else returns them all. A str: what makes the\n"
     "request undecodable (batches may have been handed on before)."},
    {NULL, NULL, 0, NULL},
};

/* ---- the Python type ----------------------------------------------------------------------- */

static PyObject *Plan_scan(Plan *self, PyObject *arg) {
    if (self->prefixes == NULL) { /* made with Plan.__new__ alone: no key sets to look in */
        PyErr_SetString(PyExc_RuntimeError, "Plan.__init__ was not called");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) != 0) return NULL;
    PyObject *resources = PyList_New(0), *spans = PyList_New(0), *result = NULL;
    if (resources != NULL && spans != NULL) {
        Buf b = {(const uint8_t *)view.buf, (const uint8_t *)view.buf + view.len};
        int rc = request(b, self, resources, spans);
        if (rc == OK) result = PyTuple_Pack(2, resources, spans);
        else if (rc == FALLBACK) result = Py_NewRef(Py_None);
    }
    Py_XDECREF(resources);
    Py_XDECREF(spans);
    PyBuffer_Release(&view);
    return result;
}

static int Plan_init(Plan *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"span_keys",       "prefixes",           "resource_keys",
                            "event_names",     "event_keys",         "max_value_bytes",
                            "max_span_attributes", NULL};
    PyObject *span_keys, *prefixes, *resource_keys, *event_names, *event_keys;
    Py_ssize_t limit, cap;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOnn", names, &span_keys, &prefixes,
                                     &resource_keys, &event_names, &event_keys, &limit, &cap))
        return -1;
    if (limit < 1) {
        PyErr_Format(PyExc_ValueError, "max_value_bytes must be positive, got %zd", limit);
        return -1;
    }
    if (cap < 1) {
        PyErr_Format(PyExc_ValueError, "max_span_attributes must be positive, got %zd", cap);
        return -1;
    }
    if (self->prefixes != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a Plan is initialized once");
        return -1;
    }
    if (self->recent == NULL && (self->recent = PyMem_Calloc(1, sizeof(Recent))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject *encoded = PyList_New(0), *iterator = PyObject_GetIter(prefixes), *prefix;
    if (encoded == NULL || iterator == NULL) goto failed;
    while ((prefix = PyIter_Next(iterator)) != NULL) {
        PyObject *bytes = PyUnicode_AsUTF8String(prefix);
        Py_DECREF(prefix);
        if (bytes == NULL || PyList_Append(encoded, bytes) != 0) {
            Py_XDECREF(bytes);
            goto failed;
        }
        Py_DECREF(bytes);
    }
    if (PyErr_Occurred()) goto failed;
    self->prefixes = PyList_AsTuple(encoded);
    Py_CLEAR(encoded);
    Py_CLEAR(iterator);
    self->limit = limit;
    self->cap = cap;
    if (self->prefixes == NULL || keyset_init(&self->span_keys, span_keys) != 0 ||
        keyset_init(&self->resource_keys, resource_keys) != 0 ||
        keyset_init(&self->event_names, event_names) != 0 ||
        keyset_init(&self->event_keys, event_keys) != 0)
        return -1;
    return 0;
failed:
    Py_XDECREF(encoded);
    Py_XDECREF(iterator);
    return -1;
}

static void Plan_dealloc(Plan *self) {
    keyset_clear(&self->span_keys);
    keyset_clear(&self->resource_keys);
    keyset_clear(&self->event_names);
    keyset_clear(&self->event_keys);
    Py_CLEAR(self->prefixes);
    recent_clear(self->recent);
    self->recent = NULL;
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Plan_methods[] = {
    {"scan", (PyCFunction)Plan_scan, METH_O,
     "scan(body) -> (resources, spans) | None: see toolwatch.ingest.scan"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "toolwatch.ingest._wire.Plan",
    .tp_basicsize = sizeof(Plan),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "What to keep of a request: Plan(span_keys, prefixes, resource_keys, "
              "event_names, event_keys, max_value_bytes, max_span_attributes).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Plan_init,
    .tp_dealloc = (destructor)Plan_dealloc,
    .tp_methods = Plan_methods,
};

/* SCHEMA: {message full name: {field number: (field name, kind)}}. */
static PyObject *schema(void) {
    static const char *const KIND_NAMES[] = {"varint", "fixed64", "fixed32",
                                             "bytes",  "string",  "message"};
    PyObject *result = PyDict_New();
    if (result == NULL) return NULL;
    for (size_t i = 0; i < sizeof ALL_MESSAGES / sizeof ALL_MESSAGES[0]; i++) {
        const Message *m = ALL_MESSAGES[i];
        PyObject *fields = PyDict_New();
        if (fields == NULL || PyDict_SetItemString(result, m->name, fields) != 0) goto failed;
        Py_DECREF(fields);
        for (int k = 0; k < m->count; k++) {
            const Field *f = &m->fields[k];
            PyObject *number = PyLong_FromUnsignedLong(f->number);
            PyObject *entry = Py_BuildValue("(ss)", f->name, KIND_NAMES[f->kind]);
            int rc = number && entry ? PyDict_SetItem(fields, number, entry) : -1;
            Py_XDECREF(number);
            Py_XDECREF(entry);
            if (rc != 0) goto failed;
        }
    }
    return result;
failed:
    Py_DECREF(result);
    return NULL;
}

static int module_exec(PyObject *module) {
    if (PyType_Ready(&PlanType) < 0) return -1;
    if (KIND_RESOURCE == NULL) {
        KIND_RESOURCE = PyUnicode_InternFromString("resource");
        KIND_SPANS = PyUnicode_InternFromString("spans");
        KIND_REJECTED = PyUnicode_InternFromString("rejected");
        if (KIND_RESOURCE == NULL || KIND_SPANS == NULL || KIND_REJECTED == NULL) return -1;
    }
    if (PyModule_AddObjectRef(module, "Plan", (PyObject *)&PlanType) < 0) return -1;
    PyObject *table = schema();
    if (table == NULL) return -1;
    int rc = PyModule_AddObjectRef(module, "SCHEMA", table);
    Py_DECREF(table);
    return rc;
}

static PyModuleDef_Slot module_slots[] = {{Py_mod_exec, module_exec}, {0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "toolwatch.ingest._wire",
    .m_doc = "The compiled OTLP trace scanner (see toolwatch.ingest.scan).",
    .m_size = 0,
    .m_methods = module_methods,
    .m_slots = module_slots,
};

PyMODINIT_FUNC PyInit__wire(void) { return PyModuleDef_Init(&module_def); }
