import keras
from keras import ops

from keras_tfm.validation import check_finite_float, check_positive_float


@keras.saving.register_keras_serializable(package="keras_tfm")
class Distiller(keras.Model):
    """Knowledge distillation (Hinton et al., 2015): a student learns from a
    frozen teacher's temperature-softened outputs and from the hard labels.

        loss = alpha * student_loss(y, s)
             + (1 - alpha) * T^2 * KL(softmax(t / T) || softmax(s / T))

    where s and t are the student's and teacher's logits. T^2 keeps the soft
    term's gradients on the scale of the hard one. This is the keras.io
    "Knowledge Distillation" example, extended to token logits: with
    `padding_id`, positions whose label is padding count in neither term (give
    the student loss its own padding handling, e.g.
    `TokenCrossEntropy(ignore_class=0)`). Only the student is trained; keep
    and save `distiller.student`.

    With `teacher=None` the teacher's logits come with the data, computed
    beforehand (offline distillation): each target is a pair `(labels,
    teacher_logits)`. That is how a teacher with another tokenizer than the
    student's teaches it (e.g. a fine-tuned MiniLM teaching a small encoder
    with its own WordPiece vocabulary), and it spares a teacher forward pass
    per step.

    Args:
        teacher: a trained model returning logits, frozen here; or None for
            teacher logits given with the labels.
        student: the model to train, same inputs and logits shape.

    Call arguments:
        inputs: the student's (and teacher's) inputs.

    Returns:
        The student's logits.

    Example:
    >>> teacher = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    >>> student = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    >>> distiller = keras_tfm.training.Distiller(teacher, student)
    >>> distiller.compile(
    ...     "adam",
    ...     student_loss_fn=keras.losses.SparseCategoricalCrossentropy(
    ...         from_logits=True),
    ...     alpha=0.1, temperature=3.0)
    >>> history = distiller.fit(np.ones((8, 4)), np.zeros(8), verbose=0)
    >>> sorted(history.history)
    ['distillation_loss', 'loss', 'student_loss']

    Offline, from logits computed beforehand:
    >>> offline = keras_tfm.training.Distiller(None, student)
    >>> offline.compile(
    ...     "adam",
    ...     student_loss_fn=keras.losses.SparseCategoricalCrossentropy(
    ...         from_logits=True))
    >>> teacher_logits = np.asarray(teacher(np.ones((8, 4))))
    >>> history = offline.fit(
    ...     np.ones((8, 4)), (np.zeros(8), teacher_logits), verbose=0)
    """

    def __init__(self, teacher, student, **kwargs):
        models = (("teacher", teacher), ("student", student))
        for name, model in models[teacher is None :]:
            if not isinstance(model, keras.Model):
                raise ValueError(
                    f"`{name}` must be a keras.Model. Received: {name}={model!r}"
                )
        super().__init__(**kwargs)
        self.teacher = teacher
        self.student = student
        if teacher is not None:
            teacher.trainable = False
        self.student_loss_tracker = keras.metrics.Mean(name="student_loss")
        self.distillation_loss_tracker = keras.metrics.Mean(name="distillation_loss")

    def compile(
        self,
        optimizer="adam",
        metrics=None,
        student_loss_fn=None,
        distillation_loss_fn=None,
        alpha=0.1,
        temperature=3.0,
        padding_id=None,
        **kwargs,
    ):
        """Configures distillation.

        Args:
            optimizer: the student's optimizer.
            metrics: metrics of the student's logits against the labels.
            student_loss_fn: loss of the student's logits against the hard
                labels (required).
            distillation_loss_fn: loss between the softened teacher and
                student probabilities; default KL divergence averaged over
                the real (non-padding, weighted) positions.
            alpha: weight of the hard-label loss, in [0, 1].
            temperature: softening temperature T > 0.
            padding_id: label id of padding positions (token logits), or None.
        """
        if student_loss_fn is None:
            raise ValueError("`student_loss_fn` is required. Received: None")
        if not 0.0 <= check_finite_float("alpha", alpha) <= 1.0:
            raise ValueError(f"`alpha` must be in [0, 1]. Received: alpha={alpha!r}")
        check_positive_float("temperature", temperature)
        super().compile(optimizer=optimizer, metrics=metrics, **kwargs)
        self.student_loss_fn = student_loss_fn
        self.distillation_loss_fn = distillation_loss_fn or keras.losses.KLDivergence(
            reduction="mean_with_sample_weight"
        )
        self.alpha = float(alpha)
        self.temperature = float(temperature)
        self.padding_id = padding_id

    def call(self, inputs, training=None):
        return self.student(inputs, training=training)

    def compute_loss(
        self, x=None, y=None, y_pred=None, sample_weight=None, training=True
    ):
        y, teacher_logits = self._labels_and_teacher_logits(x, y)
        teacher_logits = ops.cast(teacher_logits, "float32")
        student_logits = ops.cast(y_pred, "float32")
        classes = (teacher_logits.shape[-1], student_logits.shape[-1])
        if None not in classes and classes[0] != classes[1]:
            raise ValueError(
                "The teacher's and the student's logits must have the same "
                f"number of classes. Received: {classes[0]} and {classes[1]}"
            )
        student_loss = self.student_loss_fn(y, student_logits, sample_weight)

        # Weights of the soft term: one per position that has a prediction.
        weights = ops.ones(ops.shape(student_logits)[:-1], "float32")
        if self.padding_id is not None:
            weights = ops.cast(ops.not_equal(y, self.padding_id), "float32")
        if sample_weight is not None:
            sample_weight = ops.cast(sample_weight, "float32")
            while len(sample_weight.shape) < len(weights.shape):
                sample_weight = ops.expand_dims(sample_weight, -1)
            weights = weights * sample_weight
        temperature = self.temperature
        distillation_loss = self.distillation_loss_fn(
            ops.softmax(teacher_logits / temperature, axis=-1),
            ops.softmax(student_logits / temperature, axis=-1),
            sample_weight=weights,
        ) * (temperature**2)

        self.student_loss_tracker.update_state(student_loss)
        self.distillation_loss_tracker.update_state(distillation_loss)
        return self.alpha * student_loss + (1 - self.alpha) * distillation_loss

    def _labels_and_teacher_logits(self, x, y):
        if self.teacher is not None:
            return y, self.teacher(x, training=False)
        if not isinstance(y, (tuple, list)) or len(y) != 2:
            raise ValueError(
                "A Distiller without a teacher needs targets `(labels, "
                f"teacher_logits)`. Received: y={y!r}"
            )
        return y

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        if self.teacher is None:
            y, _ = self._labels_and_teacher_logits(x, y)
        return super().compute_metrics(x, y, y_pred, sample_weight)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "teacher": keras.saving.serialize_keras_object(self.teacher),
                "student": keras.saving.serialize_keras_object(self.student),
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for name in ("teacher", "student"):
            if config[name] is not None:
                config[name] = keras.saving.deserialize_keras_object(config[name])
        return cls(**config)
