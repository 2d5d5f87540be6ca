"""The `local` cluster backend: the client the lifecycle manager uses (`client`), and the
node agent it talks to (`node_agent`, the local stand-in for a kubelet), which runs the
learners as processes (`agent_learners`)."""
