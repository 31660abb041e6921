"""N-D parallelism: data parallel replicas, FSDP2 sharding, tensor and context parallel over one
device mesh (`ParallelismConfig`, its handlers, the mesh, tensor parallel plans, the mesh-wide norm)."""
