// E2B's volumes (docs/volumes.md): the control plane, /volumes (X-API-Key,
// per team), and the content API, /volumecontent/{volumeID}/{dir,path,file}
// (Authorization: Bearer <the volume's token>), over VolumeStore and
// VolumeFs (core/volumes.h, core/volume_fs.h):
//   POST   /volumes {name, sizeMB?}      201 {volumeID, name, token}
//   GET    /volumes                      200 [{volumeID, name, sizeMB, createdAt}]
//   GET    /volumes/{id|name}            200 {volumeID, name, token, sizeMB, createdAt}
//   DELETE /volumes/{id|name}            204; 409 while a sandbox mounts it
//   GET    /volumecontent/{id}/dir?path=&depth=            200 [VolumeEntryStat]
//   POST   /volumecontent/{id}/dir?path=&uid=&gid=&mode=&force=   201 VolumeEntryStat
//   GET    /volumecontent/{id}/path?path=                  200 VolumeEntryStat
//   PATCH  /volumecontent/{id}/path?path= {uid?,gid?,mode?} 200 VolumeEntryStat
//   DELETE /volumecontent/{id}/path?path=                  204
//   GET    /volumecontent/{id}/file?path=                  200 the bytes (an attachment)
//   PUT    /volumecontent/{id}/file?path=&uid=&gid=&mode=&force=  200 VolumeEntryStat
// Another team's volume, or a token that is not the volume's, is 404.
// Errors: {"code","message"}; a full volume is 507.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/api_base.h"

namespace airlock::server {

class VolumesApi : public ApiHandlers {
 public:
  explicit VolumesApi(const Services& s) : ApiHandlers(s) {}
  // /volumes and /volumes/{id} (params: empty or the id).
  void HandleVolumes(std::shared_ptr<HttpConn> c, const Caller& caller, const std::vector<std::string>& params);
  // Any /volumecontent/ request (no API key: the volume's token).
  void HandleContent(std::shared_ptr<HttpConn> c);

 private:
  void Content(std::shared_ptr<HttpConn> c, const std::string& kind, const VolumeRecord& v, const std::string& root);
  void WriteFile(std::shared_ptr<HttpConn> c, const VolumeRecord& v, const std::string& root, const std::string& path);
  void ReadFile(std::shared_ptr<HttpConn> c, const std::string& root, const std::string& path);
};

}  // namespace airlock::server
