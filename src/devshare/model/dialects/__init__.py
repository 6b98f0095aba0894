"""One module per request dialect: it reads a container's resources and turns them into
:class:`~devshare.model.request.DeviceRequest` values, recording every problem it finds.

- :mod:`.koordinator`: ``koordinator.sh/gpu*``, ``rdma``, ``fpga`` (and the ``kubernetes.io/`` spellings)
- :mod:`.nvidia`: ``nvidia.com/gpu``
- :mod:`.mgpu`: ``vke.volcengine.com/mgpu-*`` and the ``container-multiple-gpu`` annotation
- :mod:`.aliyun`: ``aliyun.com/gpu-mem`` and ``aliyun.com/gpu-count``

The rules themselves live in :mod:`devshare.model.validation`; the pod-level reader is
:mod:`devshare.model.pod`.
"""
