#include "envd/messages.h"

#include <cctype>
#include <cstring>

namespace airlock::envd {
namespace {

// Looks up a field by its JSON name, then by its proto name. nullptr when
// absent or null (proto3 JSON treats null as the default value).
const Json* Field(const Json& j, const char* json_name, const char* proto_name = nullptr) {
  auto it = j.find(json_name);
  if (it == j.end() && proto_name) it = j.find(proto_name);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

Status TypeError(const char* field, const char* want) {
  return InvalidArgument(std::string("field '") + field + "' must be " + want);
}

StatusOr<std::string> GetString(const Json& j, const char* name, const char* proto = nullptr) {
  const Json* f = Field(j, name, proto);
  if (!f) return std::string();
  if (!f->is_string()) return TypeError(name, "a string");
  return f->get<std::string>();
}

StatusOr<std::optional<std::string>> GetOptString(const Json& j, const char* name,
                                                  const char* proto = nullptr) {
  const Json* f = Field(j, name, proto);
  if (!f) return std::optional<std::string>();
  if (!f->is_string()) return TypeError(name, "a string");
  return std::optional<std::string>(f->get<std::string>());
}

StatusOr<std::optional<bool>> GetOptBool(const Json& j, const char* name, const char* proto = nullptr) {
  const Json* f = Field(j, name, proto);
  if (!f) return std::optional<bool>();
  if (!f->is_boolean()) return TypeError(name, "a boolean");
  return std::optional<bool>(f->get<bool>());
}

StatusOr<uint32_t> GetUint32(const Json& j, const char* name, const char* proto = nullptr) {
  const Json* f = Field(j, name, proto);
  if (!f) return uint32_t{0};
  auto v = Uint32FromJson(*f);
  if (!v.ok()) return TypeError(name, "a uint32");
  return *v;
}

StatusOr<std::map<std::string, std::string>> GetStringMap(const Json& j, const char* name) {
  std::map<std::string, std::string> out;
  const Json* f = Field(j, name);
  if (!f) return out;
  if (!f->is_object()) return TypeError(name, "an object");
  for (auto it = f->begin(); it != f->end(); ++it) {
    if (!it.value().is_string()) return TypeError(name, "a map of strings");
    out[it.key()] = it.value().get<std::string>();
  }
  return out;
}

StatusOr<const Json*> GetObject(const Json& j, const char* name, const char* proto = nullptr) {
  const Json* f = Field(j, name, proto);
  if (f && !f->is_object()) return TypeError(name, "an object");
  return f;
}

StatusOr<std::optional<PtySize>> GetPty(const Json& j) {
  ASSIGN_OR_RETURN(const Json* pty, GetObject(j, "pty"));
  if (!pty) return std::optional<PtySize>();
  PtySize size;
  ASSIGN_OR_RETURN(const Json* sz, GetObject(*pty, "size"));
  if (sz) {
    ASSIGN_OR_RETURN(size.cols, GetUint32(*sz, "cols"));
    ASSIGN_OR_RETURN(size.rows, GetUint32(*sz, "rows"));
  }
  return std::optional<PtySize>(size);
}

StatusOr<ProcessSelector> GetSelector(const Json& j) {
  ASSIGN_OR_RETURN(const Json* p, GetObject(j, "process"));
  if (!p) return InvalidArgument("missing process selector");
  return ProcessSelectorFromJson(*p);
}

StatusOr<std::string> GetBytes(const Json& j, const char* name) {
  const Json* f = Field(j, name);
  if (!f) return std::string();
  if (!f->is_string()) return TypeError(name, "a base64 string");
  auto d = Base64Decode(f->get_ref<const std::string&>());
  if (!d.ok()) return InvalidArgument(std::string("field '") + name + "': " + d.status().message());
  return std::move(d).value();
}


}  // namespace

StatusOr<Json> ParseJsonObject(std::string_view body) {
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("request body is not valid JSON");
  if (!j.is_object()) return InvalidArgument("request body must be a JSON object");
  return j;
}

std::string Dump(const OJson& j) { return j.dump(-1, ' ', false, OJson::error_handler_t::replace); }

OJson ToJson(const ProcessConfig& c) {
  OJson j = OJson::object();
  j["cmd"] = c.cmd;
  if (!c.args.empty()) j["args"] = c.args;
  if (!c.envs.empty()) {
    OJson e = OJson::object();
    for (const auto& [k, v] : c.envs) e[k] = v;
    j["envs"] = std::move(e);
  }
  if (c.cwd) j["cwd"] = *c.cwd;
  return j;
}

StatusOr<ProcessConfig> ProcessConfigFromJson(const Json& j) {
  if (!j.is_object()) return InvalidArgument("process config must be an object");
  ProcessConfig c;
  ASSIGN_OR_RETURN(c.cmd, GetString(j, "cmd"));
  if (const Json* a = Field(j, "args")) {
    if (!a->is_array()) return TypeError("args", "an array of strings");
    for (const auto& s : *a) {
      if (!s.is_string()) return TypeError("args", "an array of strings");
      c.args.push_back(s.get<std::string>());
    }
  }
  ASSIGN_OR_RETURN(c.envs, GetStringMap(j, "envs"));
  ASSIGN_OR_RETURN(c.cwd, GetOptString(j, "cwd"));
  return c;
}

OJson ToJson(const ProcessSelector& s) {
  OJson j = OJson::object();
  if (s.pid) j["pid"] = *s.pid;
  else if (s.tag) j["tag"] = *s.tag;
  return j;
}

StatusOr<ProcessSelector> ProcessSelectorFromJson(const Json& j) {
  if (!j.is_object()) return InvalidArgument("process selector must be an object");
  ProcessSelector s;
  if (const Json* p = Field(j, "pid")) {
    auto v = Uint32FromJson(*p);
    if (!v.ok()) return TypeError("pid", "a uint32");
    s.pid = *v;
  }
  ASSIGN_OR_RETURN(s.tag, GetOptString(j, "tag"));
  if (!s.pid && !s.tag) return InvalidArgument("process selector needs a pid or a tag");
  return s;
}

OJson ToJson(const StartRequest& r) {
  OJson j = OJson::object();
  j["process"] = ToJson(r.process);
  if (r.pty) j["pty"] = {{"size", {{"cols", r.pty->cols}, {"rows", r.pty->rows}}}};
  if (r.tag) j["tag"] = *r.tag;
  if (r.stdin) j["stdin"] = *r.stdin;
  return j;
}

StatusOr<StartRequest> StartRequestFromJson(const Json& j) {
  StartRequest r;
  ASSIGN_OR_RETURN(const Json* p, GetObject(j, "process"));
  if (!p) return InvalidArgument("missing process config");
  ASSIGN_OR_RETURN(r.process, ProcessConfigFromJson(*p));
  ASSIGN_OR_RETURN(r.pty, GetPty(j));
  ASSIGN_OR_RETURN(r.tag, GetOptString(j, "tag"));
  ASSIGN_OR_RETURN(r.stdin, GetOptBool(j, "stdin"));
  return r;
}

StatusOr<ProcessSelector> SelectorRequestFromJson(const Json& j) { return GetSelector(j); }

const char* StreamName(DataEvent::Stream s) {
  static constexpr const char* kNames[] = {"stdout", "stderr", "pty"};
  return kNames[static_cast<size_t>(s)];
}

OJson ToJson(const OutputOffsets& o) {
  OJson j = OJson::object();
  for (size_t i = 0; i < o.size(); ++i) {
    if (o[i]) j[StreamName(DataEvent::Stream(i))] = Int64ToJson(static_cast<int64_t>(o[i]));
  }
  return j;
}

StatusOr<OutputOffsets> OutputOffsetsFromJson(const Json& j) {
  if (!j.is_object()) return InvalidArgument("output offsets must be an object");
  OutputOffsets o{};
  for (size_t i = 0; i < o.size(); ++i) {
    const char* name = StreamName(DataEvent::Stream(i));
    const Json* f = Field(j, name);
    if (!f) continue;
    auto v = Uint64FromJson(*f);
    if (!v.ok()) return TypeError(name, "a uint64");
    o[i] = *v;
  }
  return o;
}

StatusOr<ConnectRequest> ConnectRequestFromJson(const Json& j) {
  ConnectRequest r;
  ASSIGN_OR_RETURN(r.process, GetSelector(j));
  ASSIGN_OR_RETURN(const Json* from, GetObject(j, "resumeFrom", "resume_from"));
  if (from) {
    ASSIGN_OR_RETURN(auto o, OutputOffsetsFromJson(*from));
    r.resume_from = o;
  }
  return r;
}

StatusOr<SendSignalRequest> SendSignalRequestFromJson(const Json& j) {
  SendSignalRequest r;
  ASSIGN_OR_RETURN(r.process, GetSelector(j));
  if (const Json* s = Field(j, "signal")) {
    ASSIGN_OR_RETURN(r.signal, SignalFromJson(*s));
  }
  if (const Json* s = Field(j, "scope")) {
    static constexpr std::pair<const char*, SignalScope> kNames[] = {
        {"SIGNAL_SCOPE_UNSPECIFIED", SignalScope::kUnspecified}, {"SIGNAL_SCOPE_PROCESS", SignalScope::kProcess},
        {"SIGNAL_SCOPE_GROUP", SignalScope::kGroup},             {"process", SignalScope::kProcess},
        {"group", SignalScope::kGroup}};
    bool known = false;
    if (s->is_string()) {
      for (const auto& [name, v] : kNames) {
        if (*s == name) {
          r.scope = v;
          known = true;
        }
      }
    } else if (auto n = Uint32FromJson(*s); n.ok() && *n <= 2) {
      r.scope = static_cast<SignalScope>(*n);
      known = true;
    }
    if (!known) return InvalidArgument("field 'scope' must be SIGNAL_SCOPE_PROCESS or SIGNAL_SCOPE_GROUP");
  }
  return r;
}

StatusOr<SendInputRequest> SendInputRequestFromJson(const Json& j) {
  SendInputRequest r;
  ASSIGN_OR_RETURN(r.process, GetSelector(j));
  ASSIGN_OR_RETURN(const Json* in, GetObject(j, "input"));
  if (!in) return InvalidArgument("missing input");
  if (Field(*in, "pty")) {
    r.input.kind = ProcessInput::Kind::kPty;
    ASSIGN_OR_RETURN(r.input.data, GetBytes(*in, "pty"));
  } else {
    ASSIGN_OR_RETURN(r.input.data, GetBytes(*in, "stdin"));
  }
  return r;
}

StatusOr<UpdateRequest> UpdateRequestFromJson(const Json& j) {
  UpdateRequest r;
  ASSIGN_OR_RETURN(r.process, GetSelector(j));
  ASSIGN_OR_RETURN(r.pty, GetPty(j));
  return r;
}

EndEvent EndEventFromExit(std::optional<int> exit_code, std::optional<int> signal) {
  EndEvent e;
  if (exit_code) {
    e.exit_code = *exit_code;
    e.exited = true;
    e.status = "exit status " + std::to_string(*exit_code);
  } else {
    e.exit_code = -1;
    e.exited = false;
    int sig = signal.value_or(0);
    if (sig == 9) {
      e.status = "signal: killed";
    } else {
      const char* d = sig > 0 ? sigdescr_np(sig) : nullptr;
      std::string s = d ? d : "signal " + std::to_string(sig);
      for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      e.status = "signal: " + s;
    }
  }
  if (!(e.exited && e.exit_code == 0)) e.error = e.status;
  return e;
}

OJson ToJson(const ProcessEvent& ev) {
  OJson j = OJson::object();
  if (auto* s = std::get_if<StartEvent>(&ev)) {
    OJson b = OJson::object();
    if (s->pid) b["pid"] = s->pid;
    if (s->offsets) b["offsets"] = ToJson(*s->offsets);
    j["start"] = std::move(b);
  } else if (auto* d = std::get_if<DataEvent>(&ev)) {
    OJson b = {{StreamName(d->stream), Base64Encode(d->data)}};
    if (d->offset) b["offset"] = Int64ToJson(static_cast<int64_t>(d->offset));
    j["data"] = std::move(b);
  } else if (auto* e = std::get_if<EndEvent>(&ev)) {
    OJson b = OJson::object();
    if (e->exit_code != 0) b["exitCode"] = e->exit_code;
    if (e->exited) b["exited"] = true;
    if (!e->status.empty()) b["status"] = e->status;
    if (e->error) b["error"] = *e->error;
    j["end"] = std::move(b);
  } else {
    j["keepalive"] = OJson::object();
  }
  return j;
}

StatusOr<ProcessEvent> ProcessEventFromJson(const Json& j) {
  if (!j.is_object()) return InvalidArgument("event must be an object");
  ASSIGN_OR_RETURN(const Json* s, GetObject(j, "start"));
  if (s) {
    StartEvent e;
    ASSIGN_OR_RETURN(e.pid, GetUint32(*s, "pid"));
    ASSIGN_OR_RETURN(const Json* o, GetObject(*s, "offsets"));
    if (o) {
      ASSIGN_OR_RETURN(auto offsets, OutputOffsetsFromJson(*o));
      e.offsets = offsets;
    }
    return ProcessEvent(e);
  }
  ASSIGN_OR_RETURN(const Json* d, GetObject(j, "data"));
  if (d) {
    DataEvent e;
    if (Field(*d, "stderr")) {
      e.stream = DataEvent::Stream::kStderr;
      ASSIGN_OR_RETURN(e.data, GetBytes(*d, "stderr"));
    } else if (Field(*d, "pty")) {
      e.stream = DataEvent::Stream::kPty;
      ASSIGN_OR_RETURN(e.data, GetBytes(*d, "pty"));
    } else {
      ASSIGN_OR_RETURN(e.data, GetBytes(*d, "stdout"));
    }
    if (const Json* o = Field(*d, "offset")) {
      auto v = Uint64FromJson(*o);
      if (!v.ok()) return TypeError("offset", "a uint64");
      e.offset = *v;
    }
    return ProcessEvent(std::move(e));
  }
  ASSIGN_OR_RETURN(const Json* en, GetObject(j, "end"));
  if (en) {
    EndEvent e;
    if (const Json* c = Field(*en, "exitCode", "exit_code")) {
      auto v = Int32FromJson(*c);
      if (!v.ok()) return TypeError("exitCode", "an int32");
      e.exit_code = *v;
    }
    ASSIGN_OR_RETURN(auto exited, GetOptBool(*en, "exited"));
    e.exited = exited.value_or(false);
    ASSIGN_OR_RETURN(e.status, GetString(*en, "status"));
    ASSIGN_OR_RETURN(e.error, GetOptString(*en, "error"));
    return ProcessEvent(std::move(e));
  }
  ASSIGN_OR_RETURN(const Json* k, GetObject(j, "keepalive"));
  if (k) return ProcessEvent(KeepAliveEvent{});
  return InvalidArgument("event has no known member");
}

std::string EventResponsePayload(const ProcessEvent& e) {
  if (auto* d = std::get_if<DataEvent>(&e)) {
    std::string out = "{\"event\":{\"data\":{\"";
    out += StreamName(d->stream);
    out += "\":\"";
    out += Base64Encode(d->data);
    out += '"';
    if (d->offset) out += ",\"offset\":\"" + std::to_string(d->offset) + '"';
    out += "}}}";
    return out;
  }
  OJson j = OJson::object();
  j["event"] = ToJson(e);
  return Dump(j);
}

StatusOr<ProcessEvent> ParseEventResponse(std::string_view payload) {
  ASSIGN_OR_RETURN(Json j, ParseJsonObject(payload));
  ASSIGN_OR_RETURN(const Json* ev, GetObject(j, "event"));
  if (!ev) return InvalidArgument("response has no event");
  return ProcessEventFromJson(*ev);
}

OJson ToJson(const ProcessInfo& p) {
  OJson j = OJson::object();
  j["config"] = ToJson(p.config);
  if (p.pid) j["pid"] = p.pid;
  if (p.tag) j["tag"] = *p.tag;
  return j;
}

StatusOr<ProcessInfo> ProcessInfoFromJson(const Json& j) {
  if (!j.is_object()) return InvalidArgument("process info must be an object");
  ProcessInfo p;
  ASSIGN_OR_RETURN(const Json* c, GetObject(j, "config"));
  if (c) {
    ASSIGN_OR_RETURN(p.config, ProcessConfigFromJson(*c));
  }
  ASSIGN_OR_RETURN(p.pid, GetUint32(j, "pid"));
  ASSIGN_OR_RETURN(p.tag, GetOptString(j, "tag"));
  return p;
}

OJson ToJson(const EntryInfo& e) {
  OJson j = OJson::object();
  j["name"] = e.name;
  j["type"] = std::string(FileTypeName(e.type));
  j["path"] = e.path;
  j["size"] = Int64ToJson(e.size);
  j["mode"] = e.mode;
  j["permissions"] = e.permissions;
  j["owner"] = e.owner;
  j["group"] = e.group;
  j["modifiedTime"] = FormatTimestamp(e.modified_time);
  if (e.symlink_target) j["symlinkTarget"] = *e.symlink_target;
  if (!e.metadata.empty()) {
    OJson m = OJson::object();
    for (const auto& [k, v] : e.metadata) m[k] = v;
    j["metadata"] = std::move(m);
  }
  return j;
}

StatusOr<EntryInfo> EntryInfoFromJson(const Json& j) {
  if (!j.is_object()) return InvalidArgument("entry must be an object");
  EntryInfo e;
  ASSIGN_OR_RETURN(e.name, GetString(j, "name"));
  if (const Json* t = Field(j, "type")) {
    ASSIGN_OR_RETURN(e.type, FileTypeFromJson(*t));
  }
  ASSIGN_OR_RETURN(e.path, GetString(j, "path"));
  if (const Json* s = Field(j, "size")) {
    ASSIGN_OR_RETURN(e.size, Int64FromJson(*s));
  }
  ASSIGN_OR_RETURN(e.mode, GetUint32(j, "mode"));
  ASSIGN_OR_RETURN(e.permissions, GetString(j, "permissions"));
  ASSIGN_OR_RETURN(e.owner, GetString(j, "owner"));
  ASSIGN_OR_RETURN(e.group, GetString(j, "group"));
  if (const Json* t = Field(j, "modifiedTime", "modified_time")) {
    if (!t->is_string()) return TypeError("modifiedTime", "an RFC 3339 string");
    ASSIGN_OR_RETURN(e.modified_time, ParseTimestamp(t->get_ref<const std::string&>()));
  }
  ASSIGN_OR_RETURN(e.symlink_target, GetOptString(j, "symlinkTarget", "symlink_target"));
  ASSIGN_OR_RETURN(e.metadata, GetStringMap(j, "metadata"));
  return e;
}

StatusOr<std::string> PathRequestFromJson(const Json& j) { return GetString(j, "path"); }

StatusOr<ListDirRequest> ListDirRequestFromJson(const Json& j) {
  ListDirRequest r;
  ASSIGN_OR_RETURN(r.path, GetString(j, "path"));
  ASSIGN_OR_RETURN(r.depth, GetUint32(j, "depth"));
  return r;
}

StatusOr<MoveRequest> MoveRequestFromJson(const Json& j) {
  MoveRequest r;
  ASSIGN_OR_RETURN(r.source, GetString(j, "source"));
  ASSIGN_OR_RETURN(r.destination, GetString(j, "destination"));
  return r;
}

StatusOr<WatchDirRequest> WatchDirRequestFromJson(const Json& j) {
  WatchDirRequest r;
  ASSIGN_OR_RETURN(r.path, GetString(j, "path"));
  ASSIGN_OR_RETURN(auto rec, GetOptBool(j, "recursive"));
  ASSIGN_OR_RETURN(auto inc, GetOptBool(j, "includeEntry", "include_entry"));
  ASSIGN_OR_RETURN(auto net, GetOptBool(j, "allowNetworkMounts", "allow_network_mounts"));
  r.recursive = rec.value_or(false);
  r.include_entry = inc.value_or(false);
  r.allow_network_mounts = net.value_or(false);
  return r;
}

StatusOr<std::string> WatcherIdRequestFromJson(const Json& j) {
  ASSIGN_OR_RETURN(std::string id, GetString(j, "watcherId", "watcher_id"));
  if (id.empty()) return InvalidArgument("watcherId is required");
  return id;
}

OJson ToJson(const FilesystemEvent& e) {
  OJson j = OJson::object();
  j["name"] = e.name;
  if (e.type != EventType::kUnspecified) j["type"] = std::string(EventTypeName(e.type));
  if (e.entry) j["entry"] = ToJson(*e.entry);
  return j;
}

StatusOr<FilesystemEvent> FilesystemEventFromJson(const Json& j) {
  if (!j.is_object()) return InvalidArgument("filesystem event must be an object");
  FilesystemEvent e;
  ASSIGN_OR_RETURN(e.name, GetString(j, "name"));
  if (const Json* t = Field(j, "type")) {
    ASSIGN_OR_RETURN(e.type, EventTypeFromJson(*t));
  }
  ASSIGN_OR_RETURN(const Json* entry, GetObject(j, "entry"));
  if (entry) {
    ASSIGN_OR_RETURN(auto info, EntryInfoFromJson(*entry));
    e.entry = std::move(info);
  }
  return e;
}

std::string WatchStartPayload() { return R"({"start":{}})"; }
std::string WatchKeepalivePayload() { return R"({"keepalive":{}})"; }
std::string WatchEventPayload(const FilesystemEvent& e) {
  OJson j = OJson::object();
  j["filesystem"] = ToJson(e);
  return Dump(j);
}

}  // namespace airlock::envd
